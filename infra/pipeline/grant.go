package pipeline

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
)

// readStateActions are the DynamoDB actions GrantReadState and
// GrantReadIntents allow: reads of single items and of one partition
// (TransactGetItems is authorized as GetItem per item).
var readStateActions = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}

// GrantReadState lets grantee (a team's own service) read the canonical
// state: the projection items, whose partition keys start with "PJ#"
// ("PJ#<scope>/<projection>#<subject>"). One statement on the table, for
// GetItem, BatchGetItem and Query only, conditioned on
// dynamodb:LeadingKeys (every key the request names must start with
// "PJ#", and a request whose keys IAM cannot see is refused). Nothing
// else: no events or their payloads, no intents, no cursors, not the due
// index, and no write.
func (s *Pipeline) GrantReadState(grantee awsiam.IGrantable) awsiam.Grant {
	return s.grantReadKeys(grantee, pkProjections)
}

// GrantReadIntents lets grantee read the outbox intents, whose partition
// keys start with "OP#" ("OP#<operation id>"): each effect's status and
// outcome (what the downstream answered). Like GrantReadState, reads only,
// and only those items. An intent holds the effect's request payload, so
// grant it only to a service that may see what was sent downstream.
func (s *Pipeline) GrantReadIntents(grantee awsiam.IGrantable) awsiam.Grant {
	return s.grantReadKeys(grantee, pkIntents)
}

// grantReadKeys allows ReadStateActions on the table for the items under
// one partition key prefix. ForAllValues is also true when the key is
// absent, so a Null condition requires it.
func (s *Pipeline) grantReadKeys(grantee awsiam.IGrantable, prefix string) awsiam.Grant {
	return awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings(readStateActions...),
		ResourceArns: jsii.Strings(*s.Table.TableArn()),
		Conditions: &map[string]*map[string]any{
			"ForAllValues:StringLike": {"dynamodb:LeadingKeys": []string{anyKey(prefix)}},
			"Null":                    {"dynamodb:LeadingKeys": "false"},
		},
	})
}
