// Package plugin holds what kubectl-kubefarm decides without a server:
// objects in, tables, text and patch bytes out. The commands (package cli)
// only fetch the objects, call these and write the result, so every line
// the plugin prints and every byte it sends is table-tested here.
package plugin

import (
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// none stands for an empty cell, so that columns never collapse and a
// reader can tell "nothing" from a misaligned row.
const none = "-"

// Table renders rows under headers as kubectl does (columns separated by
// at least three spaces, no trailing padding).
func Table(headers []string, rows [][]string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	write := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				_, _ = w.Write([]byte{'\t'})
			}
			_, _ = w.Write([]byte(cell(c)))
		}
		_, _ = w.Write([]byte{'\n'})
	}
	write(headers)
	for _, r := range rows {
		write(r)
	}
	_ = w.Flush()
	return b.String()
}

// cell makes s safe for one table cell: one line, no tab (either would break
// the columns), and "-" when empty.
func cell(s string) string {
	if s == "" {
		return none
	}
	return strings.Join(strings.Fields(s), " ")
}

// Age is how long ago t was, in kubectl's AGE format (5m, 3h2m, 12d), or
// "-" for an unset time.
func Age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return none
	}
	d := now.Sub(t.Time)
	if d < 0 {
		// Clock skew between this machine and the API server: say 0s
		// rather than a negative age.
		d = 0
	}
	return duration.HumanDuration(d)
}
