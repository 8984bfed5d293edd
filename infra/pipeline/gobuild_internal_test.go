package pipeline

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestBuildUsesTheMakefilesBuildFlags(t *testing.T) {
	// GIVEN the repository's Makefile, whose `make build` builds the
	// bootstraps with BUILD_FLAGS
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Skip("not in the repository:", err)
	}
	m := regexp.MustCompile(`(?m)^BUILD_FLAGS := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile defines no BUILD_FLAGS")
	}
	// WHEN the construct's flags are written as the Makefile writes them
	var words []string
	for _, f := range goBuildFlags {
		if strings.Contains(f, " ") {
			f = strconv.Quote(f)
		}
		words = append(words, f)
	}
	// THEN they are the same: a bootstrap built at synth is the one
	// `make build` builds
	if got := strings.Join(words, " "); got != string(m[1]) {
		t.Errorf("construct %q, Makefile %q", got, m[1])
	}
}
