package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// helpWidth bounds the lines of every help text.
const helpWidth = 99

// wrap breaks s into lines of at most width columns, each prefixed by
// indent; explicit newlines in s are kept.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	for para := range strings.SplitSeq(s, "\n") {
		line := indent
		for _, w := range strings.Fields(para) {
			if len(line) > len(indent) && len(line)+1+len(w) > width {
				b.WriteString(line + "\n")
				line = indent
			}
			if len(line) > len(indent) {
				line += " "
			}
			line += w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// usageFunc prints a flag set's flags, wrapped to helpWidth columns, then
// examples.
func usageFunc(fs *flag.FlagSet, w io.Writer, synopsis, examples string) func() {
	return func() {
		fmt.Fprintf(w, "Usage:\n  %s\n\nFlags:\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			head := "  --" + f.Name
			if name != "" {
				head += " " + name
			}
			fmt.Fprintln(w, head)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && !strings.Contains(usage, "(default") {
				if name == "string" {
					usage += fmt.Sprintf(" (default %q)", f.DefValue)
				} else {
					usage += fmt.Sprintf(" (default %s)", f.DefValue)
				}
			}
			fmt.Fprint(w, wrap(strings.ReplaceAll(usage, "\n", " "), "      ", helpWidth))
		})
		if examples != "" {
			fmt.Fprintf(w, "\nExamples:\n%s", examples)
		}
	}
}

const replayExamples = `  berth replay                                   the default workload under four policies
  berth replay --trace swf --policy easy,conservative --seeds 1-5
  berth replay --trace synthetic-mig:500 --format json
  berth replay --experiment fgd --trace openb --policy fgd,berth
  berth replay --experiment hybrid --format json --out plots
  berth replay --experiment capacity --training-p95-wait 30m \
      --inference-shortfall-pct 0.5 --out plots
  berth replay --experiment serving --policy no-colocation,colocation-packing --seeds 1-3
  berth replay --trace itp --policy easy --placement berth,blind,kueue --price on
`

const compareExamples = `  berth compare                                  synthetic, itp and swf under the default policies
  berth compare --trace synthetic,swf --policy fifo,easy --format csv
`

// version is the module's version from the build information: a tag,
// a pseudo-version, or "(devel)" with the VCS revision when built from a
// checkout.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "berth (unknown version)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	out := "berth " + v
	if rev != "" {
		out += " " + rev[:min(12, len(rev))] + dirty
	}
	return out + " " + bi.GoVersion
}
