package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/queenmq/queen-go/internal/config"
)

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3" (the Makefile and Dockerfile pass
// `git describe`); "dev" otherwise.
var version = "dev"

// commit is the git commit, set at build time with -ldflags "-X
// main.commit=<sha>" where Go's own stamp (vcs.revision) is missing: in a
// git worktree, with -buildvcs=false, or in a Docker build without .git.
var commit = ""

// command is one line of `queen help`.
type command struct {
	usage string
	doc   string
}

// commands are the subcommands, in the order help shows them.
var commands = []command{
	{"queen", "Run the broker, configured by the environment (below). It never starts a database of its own."},
	{"queen dev", "Run the broker for development: with no database configured (QUEEN_PG_URL and PG_HOST unset) it starts a throwaway PostgreSQL, deleted on exit; the WAL goes to a temporary directory, deleted on exit, unless FILE_BUFFER_DIR is set; it listens on 127.0.0.1 unless HOST is set. Killed (kill -9), it takes its PostgreSQL with it, and the next queen dev deletes the temporary directories it left."},
	{"queen wal status [--wal-only] [DIR]", "What a broker directory holds (DIR is the broker directory, default FILE_BUFFER_DIR, or its wal/ subdirectory): broker id, the WAL's record range and, from the database configured (QUEEN_PG_URL or PG_HOST), this broker's checkpoint, how many records are not yet in PostgreSQL and whether the WAL matches the checkpoint. With PostgreSQL unreachable, or no database configured, it reports the WAL side, says the checkpoint was not checked and exits 1; --wal-only checks the WAL alone (the database is not asked) and exits 0 when the WAL verifies. Read-only, safe beside a running broker; exit status 1 when something is wrong or could not be checked, and for a directory that holds neither broker.id nor wal/ and is no broker directory's wal/."},
	{"queen wal verify [DIR]", "Check every WAL record's checksum (read-only). DIR is the broker directory or its wal/ subdirectory; exit status 1 on a problem or when there are no segments."},
	{"queen wal dump [--from N] [--limit N] [--json] [--payload BYTES] [DIR]", "Print WAL records from index N on (default: the first): index, acceptance time, item count and, per item, queue, partition, message id, transactionId and the first BYTES (default 80) of the payload. --json prints one JSON object per record. Read-only, safe beside a running broker."},
	{"queen version", "Print the version, the commit it was built from and the Go version."},
	{"queen help [--markdown | COMMAND]", "This text; --markdown prints it as docs/configuration.md; COMMAND (such as `wal dump`) prints that command's usage alone, as `queen COMMAND --help` does."},
}

// help writes the usage text, or with --markdown the configuration
// reference (docs/configuration.md).
func help(w io.Writer, args []string) error {
	if len(args) > 0 && args[0] == "--markdown" {
		if len(args) > 1 {
			return fmt.Errorf("help --markdown takes no arguments: %w", errUsage)
		}
		writeMarkdown(w)
		return nil
	}
	if len(args) > 0 {
		return helpFor(w, strings.Join(args, " "))
	}
	fmt.Fprintln(w, "queen: a Queen-compatible message broker. Pushes are fsynced into a local")
	fmt.Fprintln(w, "write-ahead log, then projected into PostgreSQL; consumers pop from PostgreSQL.")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n", c.usage)
		for _, line := range config.Wrap(c.doc, 72) {
			fmt.Fprintf(w, "      %s\n", line)
		}
	}
	fmt.Fprintln(w, "\nEnvironment (an unset or empty variable takes its default; a value that does")
	fmt.Fprintln(w, "not parse stops the broker with an error naming the variable):")
	config.WriteText(w)
	return nil
}

// helpFor writes the usage and description of the commands named by
// name ("wal", "wal dump", "dev": `queen help wal dump`, `queen wal dump
// --help`), each command whose words begin with name's; an error naming
// `queen help` when none does.
func helpFor(w io.Writer, name string) error {
	want := strings.Fields("queen " + name)
	found := false
	for _, c := range commands {
		words := strings.Fields(c.usage)
		if len(words) < len(want) || !slices.Equal(words[:len(want)], want) {
			continue
		}
		found = true
		fmt.Fprintf(w, "%s\n", c.usage)
		for _, line := range config.Wrap(c.doc, 72) {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
	if !found {
		return fmt.Errorf("no command %q: %w", "queen "+name, errUsage)
	}
	return nil
}

// commandName is the leading words of args that name a command ("wal
// dump" of "wal dump --from 3 DIR"): as many as some command's usage
// begins with, so flags and directories are left out.
func commandName(args []string) string {
	n := 0
	for _, c := range commands {
		words := strings.Fields(c.usage)[1:] // without "queen"
		k := 0
		for k < len(args) && k < len(words) && args[k] == words[k] {
			k++
		}
		n = max(n, k)
	}
	return strings.Join(args[:n], " ")
}

// wantsHelp reports whether args ask for help (-h, -help or --help).
func wantsHelp(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" })
}

// writeMarkdown writes docs/configuration.md.
func writeMarkdown(w io.Writer) {
	fmt.Fprint(w, `# Configuration reference

<!-- Generated by "go generate ./cmd/queen" (queen help --markdown) from
     internal/config; edit the table there, not this file. -->

The broker is configured by environment variables only; `+"`queen help`"+` prints
the same table. Rules that hold for every variable:

- An unset or empty variable takes its default.
- A value that does not parse (`+"`LOG_LEVEL=verbose`, `PORT=abc`"+`, a negative size,
  `+"`JWT_ENABLED=yes`"+`) stops the broker at start with an error naming the
  variable; no value falls back to the default silently. All bad variables
  are reported at once.
- Booleans are exactly `+"`true` or `false`"+`.
- Durations are whole numbers in the unit shown (`+"`ms` or `s`"+`); sizes are bytes.
- Errors never echo the value of a secret (passwords, keys, the database URL).

## Commands

| command | what it does |
|---|---|
`)
	for _, c := range commands {
		fmt.Fprintf(w, "| `%s` | %s |\n", c.usage, c.doc)
	}
	config.WriteMarkdown(w)
}

// versionInfo is what `queen version` prints.
type versionInfo struct {
	version, commit, commitTime, goVersion string
	modified                               bool
}

// buildVersion reads the version from the ldflags variable and the commit
// from the build info Go records (vcs.revision; absent when the binary was
// not built inside a git checkout, e.g. with `go install module@version`).
func buildVersion() versionInfo {
	v := versionInfo{version: version, commit: "unknown", goVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.commit = s.Value
			case "vcs.time":
				v.commitTime = s.Value
			case "vcs.modified":
				v.modified = s.Value == "true"
			}
		}
	}
	if commit != "" && v.commit == "unknown" {
		v.commit = commit
	}
	return v
}

func printVersion(w io.Writer) {
	v := buildVersion()
	fmt.Fprintf(w, "queen %s\n", v.version)
	commit := v.commit
	if v.modified {
		commit += " (with uncommitted changes)"
	}
	if v.commitTime != "" {
		commit += ", committed " + v.commitTime
	}
	fmt.Fprintf(w, "commit  %s\n", commit)
	fmt.Fprintf(w, "go      %s %s/%s\n", v.goVersion, runtime.GOOS, runtime.GOARCH)
}
