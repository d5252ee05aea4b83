package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLinkInsideTheRepository: README.md and docs/*.md link only to
// files of the repository (or to web pages), and every such file exists, so
// a clone has everything its docs point to.
func TestDocsLinkInsideTheRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "../shared") {
			t.Errorf("%s points outside the repository (../shared)", f)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
				continue
			}
			p := filepath.Clean(filepath.Join(filepath.Dir(f), target))
			rel, err := filepath.Rel(root, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s links to %s, outside the repository", f, target)
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, target)
			}
		}
	}
}
