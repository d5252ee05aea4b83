package config

import (
	"fmt"
	"io"
	"strings"
)

// defaultText is how a default is shown: "6632", "16777216 bytes",
// "(none)".
func (v Var) defaultText() string {
	if v.Default == "" {
		return "(none)"
	}
	if v.Unit != "" {
		return v.Default + " " + v.Unit
	}
	return v.Default
}

// WriteText writes the table for `queen help`: per section, each variable
// with its default and unit, and its description wrapped to 78 columns.
func WriteText(w io.Writer) {
	for _, sec := range Sections {
		fmt.Fprintf(w, "\n%s\n", sec)
		for _, v := range Vars {
			if v.Section != sec {
				continue
			}
			fmt.Fprintf(w, "  %-30s default %s\n", v.Name, v.defaultText())
			for _, line := range Wrap(strings.ReplaceAll(v.Doc, "`", ""), 72) {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
	}
}

// WriteMarkdown writes the table as Markdown, one table per section (the
// body of docs/configuration.md).
func WriteMarkdown(w io.Writer) {
	for _, sec := range Sections {
		fmt.Fprintf(w, "\n## %s\n\n| variable | default | unit | meaning |\n|---|---|---|---|\n", sec)
		for _, v := range Vars {
			if v.Section != sec {
				continue
			}
			def := "(none)"
			if v.Default != "" {
				def = "`" + v.Default + "`"
			}
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", v.Name, def, v.Unit, strings.ReplaceAll(v.Doc, "|", "\\|"))
		}
	}
}

// Wrap splits s into lines of at most width characters at spaces (a
// word longer than width gets a line of its own). The help text and the
// generated docs wrap with it.
func Wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
