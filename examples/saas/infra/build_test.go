package main

import (
	"debug/buildinfo"
	"debug/elf"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

func TestADeployBuildsTheSaasFunctionsFromItsOwnModule(t *testing.T) {
	// GIVEN the SaaS's app as main runs it, the functions built from ".."
	out := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out)})
	saas, err := NewSaas(app, "Saas-dev", SaasProps{Stage: "dev", ModuleDir: ".."})
	if err != nil {
		t.Fatal(err)
	}
	// WHEN it is synthesized
	res := templateResources(t, saas.Stack)
	app.Synth(nil)

	// THEN every function's asset is a linux/arm64 bootstrap built from
	// the SaaS's own main package (functions/<fn>, module example.com/saas)
	if len(saas.Pipeline.Functions) != 4 {
		t.Fatalf("functions %v", saas.Pipeline.Functions)
	}
	for fn, f := range saas.Pipeline.Functions {
		id := *saas.Stack.GetLogicalId(f.Fn.Node().DefaultChild().(awscdk.CfnElement))
		p, _ := res[id]["Properties"].(map[string]any)
		code, _ := p["Code"].(map[string]any)
		key, _ := code["S3Key"].(string)
		if !strings.HasSuffix(key, ".zip") {
			t.Fatalf("%s's code %v", fn, code)
		}
		bin := filepath.Join(out, "asset."+strings.TrimSuffix(key, ".zip"), "bootstrap")
		e, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if e.Machine != elf.EM_AARCH64 {
			t.Errorf("%s's bootstrap is for %v", fn, e.Machine)
		}
		e.Close()
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if info.Path != "example.com/saas/functions/"+fn || info.Main.Path != "example.com/saas" {
			t.Errorf("%s's bootstrap is %s of module %s", fn, info.Path, info.Main.Path)
		}
		if !f.Built {
			t.Errorf("%s is a placeholder", fn)
		}
	}
}
