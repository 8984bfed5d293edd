package main

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// assetHashes maps each of the shop's functions to its code's asset hash
// (the S3 key without ".zip") in the template.
func assetHashes(t *testing.T, shop *Shop) map[string]string {
	t.Helper()
	res := templateResources(t, shop.Stack)
	out := map[string]string{}
	for fn, f := range shop.Pipeline.Functions {
		id := *shop.Stack.GetLogicalId(f.Fn.Node().DefaultChild().(awscdk.CfnElement))
		p, _ := res[id]["Properties"].(map[string]any)
		code, _ := p["Code"].(map[string]any)
		key, _ := code["S3Key"].(string)
		if !strings.HasSuffix(key, ".zip") {
			t.Fatalf("%s's code %v", fn, code)
		}
		out[fn] = strings.TrimSuffix(key, ".zip")
	}
	return out
}

// hashesOf synthesizes the shop's app from moduleDir with bundling skipped
// (as `cdk ls` does): the hashes, nothing built.
func hashesOf(t *testing.T, moduleDir string) map[string]string {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"aws:cdk:bundling-stacks": []any{}}})
	shop, err := NewShop(app, "Shop-dev", ShopProps{Stage: "dev", ModuleDir: moduleDir})
	if err != nil {
		t.Fatal(err)
	}
	return assetHashes(t, shop)
}

func TestADeployBuildsTheShopsFunctionsFromItsOwnModule(t *testing.T) {
	// GIVEN the shop's app as main runs it, the functions built from ".."
	out := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out)})
	shop, err := NewShop(app, "Shop-dev", ShopProps{Stage: "dev", ModuleDir: ".."})
	if err != nil {
		t.Fatal(err)
	}
	// WHEN it is synthesized
	hashes := assetHashes(t, shop)
	app.Synth(nil)

	// THEN every function's asset is a linux/arm64 bootstrap built from
	// the shop's own main package (functions/<fn>, module example.com/shop)
	if len(hashes) != 4 {
		t.Fatalf("functions %v", hashes)
	}
	for fn, hash := range hashes {
		bin := filepath.Join(out, "asset."+hash, "bootstrap")
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if f.Machine != elf.EM_AARCH64 {
			t.Errorf("%s's bootstrap is for %v", fn, f.Machine)
		}
		f.Close()
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if info.Path != "example.com/shop/functions/"+fn || info.Main.Path != "example.com/shop" {
			t.Errorf("%s's bootstrap is %s of module %s", fn, info.Path, info.Main.Path)
		}
		if !shop.Pipeline.Functions[fn].Built {
			t.Errorf("%s is a placeholder", fn)
		}
	}
}

func TestTheShopsAssetHashChangesWithItsRulesOnlyAndAMissingGoIsReported(t *testing.T) {
	// GIVEN a copy of the shop's module elsewhere (its replace made
	// absolute) and its functions' hashes
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	shopDir := filepath.Join(t.TempDir(), "shop")
	if err := os.CopyFS(shopDir, os.DirFS("..")); err != nil {
		t.Fatal(err)
	}
	edit := exec.Command("go", "mod", "edit", "-replace", "github.com/effectively-once/webhooks="+root)
	edit.Dir = shopDir
	if b, err := edit.CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v: %s", err, b)
	}
	orig := hashesOf(t, shopDir)

	// WHEN files no function reads change: notes, dev.json, a sample
	// event, a rules test, the infra app itself
	for _, f := range []string{"README.md", "dev.json", "events/payment_intent.succeeded.json", "rules/rules_test.go", "infra/shop.go"} {
		appendTo(t, filepath.Join(shopDir, f), "\n")
	}
	// THEN no hash changes
	if got := hashesOf(t, shopDir); !sameHashes(got, orig) {
		t.Errorf("after unrelated changes: %v, before: %v", got, orig)
	}

	// WHEN a rule file changes
	appendTo(t, filepath.Join(shopDir, "rules", "orders.go"), "\n// a changed rule\n")
	after := hashesOf(t, shopDir)
	// THEN every function (each runs the shop's rules) has a new hash
	for fn := range orig {
		if after[fn] == orig[fn] {
			t.Errorf("%s's hash did not change with the rules", fn)
		}
	}

	// WHEN go is not on PATH
	app := awscdk.NewApp(nil)
	t.Setenv("PATH", t.TempDir())
	_, err = NewShop(app, "Shop-dev", ShopProps{Stage: "dev", ModuleDir: ".."})
	// THEN the synth fails saying so, and what to do
	if err == nil || !strings.Contains(err.Error(), "no `go` on PATH") || !strings.Contains(err.Error(), "install Go") {
		t.Errorf("without go: %v", err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func sameHashes(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
