// Command failrecap repeats, at the end of a test run, the last lines each
// failed test printed. CI keeps only the head and the tail of a run's
// output; an end-to-end run prints an hour of progress, so a failure in its
// middle is otherwise out of sight. It reads the logs of `go test -v` and
// writes nothing when no test failed.
//
//	failrecap [-lines N] [-tests N] LOG...
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// A line that says which test the following output belongs to: go test -v
// prints RUN when a test starts, and NAME or CONT when output switches back
// to a test that was paused or that printed after its subtests.
var headerLine = regexp.MustCompile(`^=== (RUN|NAME|CONT)\s+(\S+)`)

// A test's result; subtests' results are indented under their parent's.
var failLine = regexp.MustCompile(`^\s*--- FAIL: (\S+)`)

// A package's result ends whatever test was printing.
var packageLine = regexp.MustCompile(`^(PASS|FAIL|ok\s)`)

// A test binary's panic, a timeout's among them ("panic: test timed out
// after 1h0m0s"), is followed by the tests that were running, one per line
// ("\t\tTestX (3m2s)"): they fail with no "--- FAIL" line of their own.
var (
	panicLine   = regexp.MustCompile(`^panic: `)
	runningLine = regexp.MustCompile(`^\t\t(Test\S*) \(`)
)

// failure is one failed test and what it printed, in order; why, when set,
// is the panic that ended it.
type failure struct {
	name  string
	lines []string
	why   string
}

// parse reads a go test -v log and returns its failed tests with their
// output, in the order their results were printed.
func parse(r io.Reader) ([]failure, error) {
	output := map[string][]string{}
	var failed []string
	why := map[string]string{}
	current, panicked := "", ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if panicLine.MatchString(line) {
			// What follows is the runtime's: running tests, goroutines.
			current, panicked = "", line
			continue
		}
		if m := runningLine.FindStringSubmatch(line); m != nil && panicked != "" {
			failed = append(failed, m[1])
			why[m[1]] = panicked
			continue
		}
		if m := headerLine.FindStringSubmatch(line); m != nil {
			current = m[2]
			continue
		}
		if m := failLine.FindStringSubmatch(line); m != nil {
			failed = append(failed, m[1])
			continue
		}
		if packageLine.MatchString(line) {
			current, panicked = "", ""
			continue
		}
		if current != "" && strings.TrimSpace(line) != "" {
			output[current] = append(output[current], line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]failure, 0, len(failed))
	for _, name := range failed {
		out = append(out, failure{name: name, lines: output[name], why: why[name]})
	}
	return out, nil
}

// leaves keeps the failures that are not only their subtests' failure: a
// parent whose subtest failed says nothing new, except what it printed
// itself when no subtest failed.
func leaves(all []failure) []failure {
	var out []failure
	for _, f := range all {
		parent := false
		for _, g := range all {
			if strings.HasPrefix(g.name, f.name+"/") {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, f)
		}
	}
	return out
}

// write prints each leaf failure's last lines, at most maxTests of them.
func write(w io.Writer, fails []failure, maxLines, maxTests int, logs []string) {
	leaf := leaves(fails)
	if len(leaf) == 0 {
		return
	}
	names := make([]string, 0, len(leaf))
	for _, f := range leaf {
		names = append(names, f.name)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "==== failed tests, repeated at the end (last %d lines each; whole logs: %s): %s\n",
		maxLines, strings.Join(logs, " "), strings.Join(names, " "))
	for i, f := range leaf {
		if i == maxTests {
			fmt.Fprintf(w, "==== and %d more failed tests, in the logs\n", len(leaf)-maxTests)
			break
		}
		lines := f.lines
		if len(lines) > maxLines {
			lines = lines[len(lines)-maxLines:]
		}
		fmt.Fprintf(w, "---- %s\n", f.name)
		if f.why != "" {
			fmt.Fprintf(w, "     was running when the test binary stopped: %s\n", f.why)
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}

func main() {
	maxLines := flag.Int("lines", 12, "lines repeated per failed test")
	maxTests := flag.Int("tests", 3, "failed tests repeated at most")
	flag.Parse()
	var all []failure
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "failrecap:", err)
			os.Exit(2)
		}
		fails, err := parse(f)
		_ = f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "failrecap: %s: %v\n", path, err)
			os.Exit(2)
		}
		all = append(all, fails...)
	}
	write(os.Stdout, all, *maxLines, *maxTests, flag.Args())
}
