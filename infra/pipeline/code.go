package pipeline

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// placeholderFS is the folder a function is synthesized from while its
// bootstrap does not exist (its README says why).
//
//go:embed placeholder
var placeholderFS embed.FS

var (
	placeholderOnce sync.Once
	placeholderDir  string
	placeholderErr  error
)

// PlaceholderDir returns a folder holding the placeholder's files, written
// once per process under the system's temporary folder. Its name is the
// hash of its contents, and CDK hashes an asset by its files' contents, so
// a synth anywhere gets the same asset.
func PlaceholderDir() (string, error) {
	placeholderOnce.Do(func() {
		readme, err := placeholderFS.ReadFile("placeholder/README.md")
		if err != nil {
			placeholderErr = err
			return
		}
		sum := sha256.Sum256(readme)
		dir := filepath.Join(os.TempDir(), "webhooks-placeholder-"+hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			placeholderErr = err
			return
		}
		// Written through a temporary file and renamed, so two synths at
		// once never see half a file.
		tmp, err := os.CreateTemp(dir, ".readme-*")
		if err == nil {
			_, err = tmp.Write(readme)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp.Name(), filepath.Join(dir, "README.md"))
			}
			if err != nil {
				os.Remove(tmp.Name())
			}
		}
		placeholderDir, placeholderErr = dir, err
	})
	return placeholderDir, placeholderErr
}

// defaultBuildDir is this repository's build/ folder, found from this
// file's location (infra/pipeline/ in the repository); "" when the source
// location is unknown (a binary built with -trimpath).
func defaultBuildDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "build")
}

// resolver returns the function that finds each function's code from the
// Code props: Resolve if set; else Dirs[fn], else BuildDir/fn, whose
// bootstrap must exist when Strict, and is replaced by the placeholder
// otherwise.
func (c Code) resolver() func(fn string) (string, bool, error) {
	if c.Resolve != nil {
		return c.Resolve
	}
	return func(fn string) (string, bool, error) {
		dir, prop, which := c.Dirs[fn], "Code.Dirs["+fn+"]", ""
		if dir == "" {
			dir, prop = c.BuildDir, "Code.BuildDir"
			if dir == "" {
				dir, which = defaultBuildDir(), " (the default BuildDir: this repository's build/)"
			}
			dir = filepath.Join(dir, fn)
		}
		if st, err := os.Stat(filepath.Join(dir, "bootstrap")); err == nil && st.Mode().IsRegular() {
			abs, err := filepath.Abs(dir)
			return abs, true, err
		}
		if c.Strict {
			return "", false, propErr(prop, "%s does not exist%s (Code.Strict): build the %s function first", filepath.Join(dir, "bootstrap"), which, fn)
		}
		ph, err := PlaceholderDir()
		if err != nil {
			return "", false, fmt.Errorf("placeholder for %s: %w", fn, err)
		}
		return ph, false, nil
	}
}
