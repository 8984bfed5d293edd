package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3assets"
	"github.com/aws/jsii-runtime-go"
)

// GoBuild builds each function from the team's own Go module when the CDK
// app synthesizes a stack that needs it (`cdk synth`, `cdk deploy`): CDK
// asset bundling with a local bundler that runs
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -trimpath -buildvcs=false -ldflags "-s -w" -o <asset>/bootstrap <package>
//
// in ModuleDir, never Docker. An asset's hash is computed from what the
// build reads, not from the binary: the Go version (and GOARM64,
// GOEXPERIMENT, GOFIPS140), the flags above, the
// module's go.mod and go.sum, and every Go source and embedded file of the
// packages the function imports from the module and from modules replaced
// by a local folder (`go list -deps` with the same GOOS, GOARCH and tags);
// a dependency from the module cache counts by its path and version. A rule
// file's change gives the function a new hash (and a new build); a README,
// cdk.out, node_modules or .git does not. CDK reuses cdk.out/asset.<hash>
// when it exists, so an unchanged function is not built again.
//
// With Build set, a function is never synthesized from the placeholder
// unless Placeholder says so: New returns a *PropError when `go` is not on
// PATH (saying what to do), when a function's package is not a main
// package, and when a build fails (with the compiler's output; CDK builds
// while New creates the function).
type GoBuild struct {
	// ModuleDir is the folder holding the team's go.mod, absolute or
	// relative to the CDK app's working directory (`go run .` in the
	// team's infra/ folder: "..").
	ModuleDir string
	// Packages maps a function (Intake, Processor, Dispatcher, Reconciler,
	// Bridge) to its main package as `go build` takes it in ModuleDir
	// ("./functions/processor"). A function not in the map is built from
	// "./functions/<fn>".
	Packages map[string]string
	// Placeholder synthesizes every function from the construct's
	// placeholder instead of building it, for tests that check only the
	// template: nothing is built, and a stack synthesized so cannot run.
	// Never set it in an app that deploys.
	Placeholder bool
}

// goBuildFlags are `make build`'s flags (the repository's Makefile,
// BUILD_FLAGS): no RPC server in the binary, no local paths, no VCS stamp
// (the binary does not change with the checkout's commit), no symbols.
var goBuildFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w"}

// goBuildEnv is the target: Lambda's provided.al2023 on arm64, static.
var goBuildEnv = []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"}

// noDockerImage is the image CDK's bundling options require. It is never
// run: the local bundler builds or fails, it never hands over to Docker.
const noDockerImage = "effectively-once/no-docker-go-builds-locally"

// goCommand runs go in dir with the build's target environment. GOFLAGS
// from the caller's environment is dropped (a CDK app may run with
// -mod=mod, which would let a build rewrite the team's go.mod); every flag
// the build uses is written out.
func goCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		for _, k := range []string{"GOOS=", "GOARCH=", "CGO_ENABLED=", "GOFLAGS="} {
			if strings.HasPrefix(kv, k) {
				return true
			}
		}
		return false
	})
	cmd.Env = append(env, goBuildEnv...)
	return cmd
}

// errNoGo is what a synth without Go says.
var errNoGo = errors.New("no `go` on PATH: the functions are built from the team's module at synth (Build); " +
	"install Go (the version in the module's go.mod) and put it on PATH, or give prebuilt bootstraps with Code instead of Build")

// goAsset is one function's build: its package, the module it is built in
// and the hash of its inputs.
type goAsset struct {
	fn, moduleDir, pkg, hash string
}

// resolveBuild finds every function's package and the hash of its inputs;
// a *PropError when Go is missing or a package cannot be listed.
func (b *GoBuild) resolveBuild(fns []string) (map[string]*goAsset, error) {
	if b.ModuleDir == "" {
		return nil, propErr("Build.ModuleDir", "is required: the folder holding the team's go.mod")
	}
	dir, err := filepath.Abs(b.ModuleDir)
	if err != nil {
		return nil, propErr("Build.ModuleDir", "%v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return nil, propErr("Build.ModuleDir", "%s holds no go.mod", dir)
	}
	for fn := range b.Packages {
		if !slices.Contains([]string{Intake, Processor, Dispatcher, Reconciler, Bridge}, fn) {
			return nil, propErr("Build.Packages", "%q is not a function of the pipeline", fn)
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		return nil, &PropError{Prop: "Build", Err: errNoGo}
	}
	// The toolchain and the settings that change its output beside the
	// flags: GOARM64 (the instruction set), GOEXPERIMENT, GOFIPS140.
	version, err := goCommand(dir, "env", "GOVERSION", "GOARM64", "GOEXPERIMENT", "GOFIPS140").Output()
	if err != nil {
		return nil, propErr("Build", "go env in %s: %v", dir, cmdErr(err))
	}
	out := map[string]*goAsset{}
	for _, fn := range fns {
		pkg := b.Packages[fn]
		if pkg == "" {
			pkg = "./functions/" + fn
		}
		hash, err := inputHash(dir, pkg, strings.TrimSpace(string(version)))
		if err != nil {
			return nil, propErr("Build.Packages["+fn+"]", "%s: %v", pkg, err)
		}
		out[fn] = &goAsset{fn: fn, moduleDir: dir, pkg: pkg, hash: hash}
	}
	return out, nil
}

// listedPackage is what inputHash reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Dir        string
	Name       string
	Standard   bool
	Module     *struct {
		Path    string
		Version string
		Dir     string
		GoMod   string
		Main    bool
		Replace *struct {
			Path    string
			Version string
			Dir     string
			GoMod   string
		}
	}
	GoFiles, CgoFiles, CFiles, SFiles, HFiles, SysoFiles, EmbedFiles []string
	Error                                                            *struct{ Err string }
	DepsErrors                                                       []*struct{ Err string }
}

// inputHash is the hash of everything `go build pkg` reads in moduleDir,
// named by paths that do not depend on where the module is checked out.
func inputHash(moduleDir, pkg, goVersion string) (string, error) {
	cmd := goCommand(moduleDir, "list", "-deps", "-tags", "lambda.norpc", "-json", "--", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	h := sha256.New()
	fmt.Fprintf(h, "effectively-once go build v1\n%s\n%s\n%s\n%s\n", goVersion, strings.Join(goBuildEnv, " "), strings.Join(goBuildFlags, " "), pkg)
	for _, name := range []string{"go.mod", "go.sum"} {
		if err := hashFile(h, "main/"+name, filepath.Join(moduleDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var mainName string
	hashedMods := map[string]bool{}
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("go list output: %w", err)
		}
		if p.Error != nil {
			return "", errors.New(p.Error.Err)
		}
		for _, e := range p.DepsErrors {
			return "", errors.New(e.Err)
		}
		if p.Standard {
			// The Go version above names the standard library.
			continue
		}
		mainName = p.Name
		m := p.Module
		if m == nil {
			return "", fmt.Errorf("package %s belongs to no module", p.ImportPath)
		}
		modDir, label, local := m.Dir, "", m.Main
		switch {
		case m.Main:
			label = "main"
		case m.Replace != nil && m.Replace.Version == "":
			// Replaced by a local folder: its files, like the module's own.
			label, local, modDir = "replace:"+m.Path, true, m.Replace.Dir
		case m.Replace != nil:
			label = m.Replace.Path + "@" + m.Replace.Version
		default:
			label = m.Path + "@" + m.Version
		}
		if !local {
			// A module from the cache: its path and version (go.sum
			// pins its content).
			if !hashedMods[label] {
				hashedMods[label] = true
				fmt.Fprintf(h, "module %s\n", label)
			}
			continue
		}
		if !m.Main && !hashedMods[label] {
			hashedMods[label] = true
			if err := hashFile(h, label+"/go.mod", filepath.Join(modDir, "go.mod")); err != nil {
				return "", err
			}
		}
		rel, err := filepath.Rel(modDir, p.Dir)
		if err != nil {
			return "", err
		}
		files := slices.Concat(p.GoFiles, p.CgoFiles, p.CFiles, p.SFiles, p.HFiles, p.SysoFiles, p.EmbedFiles)
		slices.Sort(files)
		for _, f := range files {
			if err := hashFile(h, label+"/"+filepath.ToSlash(filepath.Join(rel, f)), filepath.Join(p.Dir, f)); err != nil {
				return "", err
			}
		}
	}
	// go list prints the package itself last.
	if mainName != "main" {
		return "", errors.New("is not a main package")
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile writes a file's name, length and contents into h.
func hashFile(h io.Writer, name, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "file %s %d\n", name, len(b))
	_, err = h.Write(b)
	return err
}

// cmdErr adds a failed command's stderr to its error.
func cmdErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// goBundler is CDK's local bundling hook for one function: TryBundle
// builds the bootstrap into the asset's output folder. It never answers
// false (that would hand the build to Docker): a failed build is an error
// that fails the synth, kept in err for New to return.
type goBundler struct {
	a   *goAsset
	err error
}

// TryBundle implements awscdk.ILocalBundling.
func (g *goBundler) TryBundle(outputDir *string, _ *awscdk.BundlingOptions) *bool {
	if err := g.build(*outputDir); err != nil {
		g.err = err
		panic(err)
	}
	return jsii.Bool(true)
}

func (g *goBundler) build(outputDir string) error {
	if _, err := exec.LookPath("go"); err != nil {
		return errNoGo
	}
	args := append([]string{"build"}, goBuildFlags...)
	args = append(args, "-o", filepath.Join(outputDir, "bootstrap"), "--", g.a.pkg)
	cmd := goCommand(g.a.moduleDir, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the %s function (go build %s in %s): %v\n%s", g.a.fn, g.a.pkg, g.a.moduleDir, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// code is the function's asset: the module folder, bundled by go build
// under the hash of its inputs. The folder itself is never uploaded.
func (g *goBundler) code() awslambda.Code {
	return awslambda.Code_FromAsset(jsii.String(g.a.moduleDir), &awss3assets.AssetOptions{
		AssetHash:     jsii.String(g.a.hash),
		AssetHashType: awscdk.AssetHashType_CUSTOM,
		Bundling: &awscdk.BundlingOptions{
			Image: awscdk.DockerImage_FromRegistry(jsii.String(noDockerImage)),
			Local: g,
		},
	})
}
