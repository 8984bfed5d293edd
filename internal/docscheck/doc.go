// Package docscheck keeps the documentation from rotting. It has no code
// of its own: its test reads README.md, every docs/*.md and the example
// modules' READMEs (examples/shop, examples/saas) and fails when they name
// something the repository does not have: a relative link to a missing
// file or heading, a make target no Makefile defines, a go run or go test
// of a package directory that does not exist, a webhookctl command or flag
// the CLI does not register, an environment variable in
// docs/configuration.md that no Go source reads, or a citation of a design
// document or issue tracker outside this repository. It runs in `make
// test` with every other test of the module and takes well under a second
// once built.
package docscheck
