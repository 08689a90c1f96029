package main

import (
	"bytes"
	"strings"
	"testing"
)

// A log as go test -v prints it: a passing test, a test whose second
// subtest failed (its parent then printed a log dump in its cleanup), a
// top-level test that failed on its own, and a second package.
const sampleLog = `=== RUN   TestPasses
    a_test.go:10: fine
--- PASS: TestPasses (0.00s)
=== RUN   TestJoin
    join_test.go:20: powered on
=== RUN   TestJoin/nodes_ready
    join_test.go:30: node Ready
=== RUN   TestJoin/clusterip
    join_test.go:40: pod Ready
    join_test.go:41: nc 10.96.0.10: timed out
        after 3m
=== NAME  TestJoin
    join_test.go:90: kubefarm-pxe log tail:
        line 1
--- FAIL: TestJoin (200.00s)
    --- PASS: TestJoin/nodes_ready (100.00s)
    --- FAIL: TestJoin/clusterip (100.00s)
FAIL
FAIL	example.com/e2e	300.000s
=== RUN   TestAlone
    alone_test.go:5: want 2, got 3
--- FAIL: TestAlone (0.01s)
FAIL
FAIL	example.com/other	0.100s
`

// recap is what failrecap prints for log, named e2e.log.
func recap(t *testing.T, log string, maxLines, maxTests int) string {
	t.Helper()
	fails, err := parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	write(&out, fails, maxLines, maxTests, []string{"e2e.log"})
	return out.String()
}

func TestRecapRepeatsTheLeafFailuresLastLines(t *testing.T) {
	want := `==== failed tests, repeated at the end (last 2 lines each; whole logs: e2e.log): TestAlone TestJoin/clusterip
---- TestJoin/clusterip
    join_test.go:41: nc 10.96.0.10: timed out
        after 3m
---- TestAlone
    alone_test.go:5: want 2, got 3
`
	if got := recap(t, sampleLog, 2, 3); got != want {
		t.Errorf("recap:\n%s\nwant:\n%s", got, want)
	}
}

func TestRecapBoundsTheTestsAndSaysNothingWhenAllPassed(t *testing.T) {
	if got := recap(t, sampleLog, 1, 1); !strings.Contains(got, "and 1 more failed tests") || strings.Contains(got, "alone_test.go") {
		t.Errorf("a recap bounded to one test:\n%s", got)
	}
	passing := "=== RUN   TestPasses\n--- PASS: TestPasses (0.00s)\nPASS\nok  \texample.com/a\t0.1s\n"
	if got := recap(t, passing, 12, 3); got != "" {
		t.Errorf("a passing run's recap is %q, want nothing", got)
	}
}

// A timeout prints no "--- FAIL" line for the test it stopped: the recap
// names the tests the panic listed as running, with the panic.
func TestRecapNamesTheTestsATimeoutStopped(t *testing.T) {
	log := "=== RUN   TestJoin\n--- PASS: TestJoin (10.00s)\n=== RUN   TestScaling\n    scale_test.go:10: growing to 3 members\n" +
		"panic: test timed out after 1h0m0s\n\trunning tests:\n\t\tTestScaling (2m3s)\n\ngoroutine 1 [running]:\n" +
		"FAIL\texample.com/e2e\t3600.085s\n"
	want := "==== failed tests, repeated at the end (last 12 lines each; whole logs: e2e.log): TestScaling\n---- TestScaling\n" +
		"     was running when the test binary stopped: panic: test timed out after 1h0m0s\n    scale_test.go:10: growing to 3 members\n"
	if got := recap(t, log, 12, 3); got != want {
		t.Errorf("recap:\n%s\nwant:\n%s", got, want)
	}
}
