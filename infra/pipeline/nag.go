package pipeline

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// AddChecks applies cdk-nag's AwsSolutions rules to everything under scope.
// A finding at error level fails `cdk synth`; each accepted finding is
// suppressed next to the resource it concerns, with its reason. reports
// writes cdk-nag's CSV report into the cloud assembly (the app does; tests
// need not).
func AddChecks(scope constructs.IConstruct, reports bool) {
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose: jsii.Bool(true),
		Reports: jsii.Bool(reports),
	}), nil)
}
