// Package layering holds the test that keeps imports running downward: the
// layers docs/architecture.md draws, as a table, checked against the import
// lines of every product package.
package layering
