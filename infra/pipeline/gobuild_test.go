package pipeline_test

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

// tinyModule writes a team's module with the four functions, each a main
// that uses the shared package rules; intake alone also uses package
// intakeonly.
func tinyModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                   "module example.com/tiny\n\ngo 1.24\n",
		"rules/rules.go":           "package rules\n\nconst Version = \"v1\"\n",
		"intakeonly/intakeonly.go": "package intakeonly\n\nconst Name = \"intake\"\n",
		"README.md":                "the team's notes\n",
	}
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		imports, use := `"example.com/tiny/rules"`, "rules.Version"
		if fn == pipeline.Intake {
			imports, use = `"example.com/tiny/intakeonly"; "example.com/tiny/rules"`, "rules.Version + intakeonly.Name"
		}
		files["functions/"+fn+"/main.go"] = "package main\n\nimport (" + imports + ")\n\nfunc main() { println(\"" + fn + "\", " + use + ") }\n"
	}
	for name, body := range files {
		writeFile(t, filepath.Join(dir, name), body)
	}
	return dir
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// assetHashes synthesizes the pipeline built from dir with bundling
// skipped (as `cdk ls` does), and returns each function's asset hash, the
// S3 key of its code without ".zip".
func assetHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"aws:cdk:bundling-stacks": []any{}}})
	st := awscdk.NewStack(app, jsii.String("TeamStack"), nil)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	return functionAssets(t, p, resources(t, st))
}

// functionAssets maps each function to its code's asset hash.
func functionAssets(t *testing.T, p *pipeline.Pipeline, res map[string]map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for fn, f := range p.Functions {
		id := *awscdk.Stack_Of(f.Fn).GetLogicalId(f.Fn.Node().DefaultChild().(awscdk.CfnElement))
		code, _ := props(res[id])["Code"].(map[string]any)
		key, _ := code["S3Key"].(string)
		if !strings.HasSuffix(key, ".zip") {
			t.Fatalf("%s's code %v", fn, code)
		}
		out[fn] = strings.TrimSuffix(key, ".zip")
	}
	return out
}

func TestBuildCompilesEachFunctionFromTheTeamsModuleIntoALinuxArm64Bootstrap(t *testing.T) {
	// GIVEN a team's module with its four function mains
	dir := tinyModule(t)
	// WHEN its app synthesizes the pipeline with Build
	out := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out)})
	st := awscdk.NewStack(app, jsii.String("TeamStack"), nil)
	pipeline.AddChecks(app, false)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	res := resources(t, st)
	app.Synth(nil)

	// THEN each function's asset holds a bootstrap built from its own main
	// package: linux/arm64, static, with make build's flags
	hashes := functionAssets(t, p, res)
	seen := map[string]bool{}
	for fn, hash := range hashes {
		if seen[hash] {
			t.Errorf("%s shares its asset %s", fn, hash)
		}
		seen[hash] = true
		if !p.Functions[fn].Built {
			t.Errorf("%s is not built", fn)
		}
		bin := filepath.Join(out, "asset."+hash, "bootstrap")
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
			t.Errorf("%s's bootstrap is %v %v", fn, f.Machine, f.Class)
		}
		// -ldflags "-s -w": no symbol table (go records no -ldflags
		// under -trimpath, so the binary itself is the evidence)
		if f.Section(".symtab") != nil {
			t.Errorf("%s's bootstrap keeps its symbol table", fn)
		}
		f.Close()
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if info.Path != "example.com/tiny/functions/"+fn || info.Main.Path != "example.com/tiny" {
			t.Errorf("%s's bootstrap is built from %s (module %s)", fn, info.Path, info.Main.Path)
		}
		for k, v := range map[string]string{"GOOS": "linux", "GOARCH": "arm64", "CGO_ENABLED": "0", "-trimpath": "true", "-tags": "lambda.norpc"} {
			if settings[k] != v {
				t.Errorf("%s's bootstrap was built with %s=%q, want %q", fn, k, settings[k], v)
			}
		}
		if _, ok := settings["vcs.revision"]; ok {
			t.Errorf("%s's bootstrap carries the checkout's commit", fn)
		}
	}
	if len(hashes) != 4 {
		t.Errorf("functions %v", hashes)
	}
	// AND nothing is a placeholder: no not-built warning, the reconciler's
	// schedule is enabled
	warn := assertions.Annotations_FromStack(st).FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*bootstrap does not exist.*")))
	if len(*warn) != 0 {
		t.Errorf("%d not-built warnings", len(*warn))
	}
	for _, r := range ofType(res, "AWS::Events::Rule") {
		if props(r)["State"] != "ENABLED" {
			t.Errorf("the reconciler's schedule is %v", props(r)["State"])
		}
	}
	if f := nagFindings(st); len(f) != 0 {
		t.Errorf("cdk-nag: %v", f)
	}
}

func TestBuildsAssetHashFollowsWhatTheBuildReadsAndNothingElse(t *testing.T) {
	// GIVEN a team's module and the asset hashes of its functions
	dir := tinyModule(t)
	before := assetHashes(t, dir)

	// WHEN files the build does not read change (notes, cdk.out,
	// node_modules, .git), or the module is checked out elsewhere
	writeFile(t, filepath.Join(dir, "README.md"), "other notes\n")
	writeFile(t, filepath.Join(dir, "cdk.out", "manifest.json"), "{}")
	writeFile(t, filepath.Join(dir, "node_modules", "x", "x.go"), "package x\n")
	writeFile(t, filepath.Join(dir, ".git", "HEAD"), "ref: refs/heads/other\n")
	writeFile(t, filepath.Join(dir, "rules", "rules_test.go"), "package rules\n")
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.CopyFS(moved, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	// THEN no hash changes
	for name, d := range map[string]string{"unrelated files": dir, "another checkout": moved} {
		if got := assetHashes(t, d); !equalMaps(got, before) {
			t.Errorf("%s: hashes %v, were %v", name, got, before)
		}
	}

	// WHEN a file only intake imports changes
	writeFile(t, filepath.Join(dir, "intakeonly", "intakeonly.go"), "package intakeonly\n\nconst Name = \"intake2\"\n")
	mid := assetHashes(t, dir)
	// THEN intake alone gets a new hash
	for fn := range before {
		if changed := mid[fn] != before[fn]; changed != (fn == pipeline.Intake) {
			t.Errorf("%s: hash changed=%v after a change to intake's own package", fn, changed)
		}
	}

	// WHEN the rules every function imports change
	writeFile(t, filepath.Join(dir, "rules", "rules.go"), "package rules\n\nconst Version = \"v2\"\n")
	after := assetHashes(t, dir)
	// THEN every function gets a new hash
	for fn := range before {
		if after[fn] == mid[fn] {
			t.Errorf("%s: hash unchanged after its rules changed", fn)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
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

func TestBuildNeverFallsBackToAPlaceholderUnlessAskedTo(t *testing.T) {
	// GIVEN a team's module without a reconciler main
	dir := tinyModule(t)
	if err := os.RemoveAll(filepath.Join(dir, "functions", pipeline.Reconciler)); err != nil {
		t.Fatal(err)
	}
	// WHEN the pipeline is built from it
	_, st := bare(t)
	_, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir}})
	// THEN New fails naming the function's package, no placeholder
	var pe *pipeline.PropError
	if !errors.As(err, &pe) || pe.Prop != "Build.Packages[reconciler]" || !strings.Contains(err.Error(), "./functions/reconciler") {
		t.Fatalf("a missing function main: %v", err)
	}

	// WHEN a function does not compile
	dir = tinyModule(t)
	writeFile(t, filepath.Join(dir, "functions", pipeline.Processor, "main.go"), "package main\n\nfunc main() { undefinedThing() }\n")
	_, st = bare(t)
	_, err = pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir}})
	// THEN New fails with go build's message
	if !errors.As(err, &pe) || pe.Prop != "Build" || !strings.Contains(err.Error(), "undefined: undefinedThing") {
		t.Fatalf("a function that does not compile: %v", err)
	}

	// WHEN a test asks for placeholders explicitly
	_, st = bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir, Placeholder: true}})
	if err != nil {
		t.Fatal(err)
	}
	// THEN every function is the placeholder (and says so)
	for fn, f := range p.Functions {
		if f.Built {
			t.Errorf("%s is built", fn)
		}
	}

	// AND Code beside Build is refused
	_, st = bare(t)
	_, err = pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir}, Code: pipeline.Code{Strict: true}})
	if !errors.As(err, &pe) || pe.Prop != "Code" {
		t.Errorf("Code beside Build: %v", err)
	}
}

func TestBuildWithoutGoOnPathFailsSayingSoAndWhatToDo(t *testing.T) {
	// GIVEN a team's module, and a PATH without go
	dir := tinyModule(t)
	_, st := bare(t)
	t.Setenv("PATH", t.TempDir())
	// WHEN the pipeline is built from it
	_, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Build: &pipeline.GoBuild{ModuleDir: dir}})
	// THEN New fails saying go is missing, and how to go on
	var pe *pipeline.PropError
	if !errors.As(err, &pe) || pe.Prop != "Build" {
		t.Fatalf("no go: %v", err)
	}
	for _, want := range []string{"no `go` on PATH", "install Go", "Code"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
