// Package window evaluates a NodePool's maintenance windows
// (spec.rollout.maintenanceWindows): whether one is open at an instant and
// when that answer next changes. It is pure: the caller passes the time.
//
// The rules are those of the API's field comments:
//
//   - A window opens at start on each of its days (every day when days is
//     empty), in its time zone, and belongs to the day it opens on: one
//     opening Sunday 22:00 for 4h is open on Monday at 01:00.
//   - It stays open for duration in elapsed time, open.Add(duration), so a
//     window across a daylight-saving change lasts exactly that long while
//     its wall-clock end moves by the change.
//   - A start that a daylight-saving change skips or repeats is read with
//     the UTC offset in effect before the change, as a clock that did not
//     jump would: on a spring-forward day 02:30 opens at 03:30 new time (the
//     instant the old clock shows 02:30), and on a fall-back day 02:30 is its
//     first occurrence. This is deliberately not left to time.Date, which
//     picks the offset after the change for zones west of UTC (02:30 in
//     America/New_York on 2026-03-08 would be 01:30 EST) and for a repeated
//     time in zones east of UTC (02:30 in Europe/Berlin on 2026-10-25 would
//     be the second occurrence, CET).
//   - Each window is half-open, [open, open+duration): it is open at its
//     opening instant and closed at its end.
//
// The zone database is compiled in (time/tzdata), so zones resolve in a
// scratch image too.
package window

import (
	"fmt"
	"slices"
	"sync"
	"time"
	_ "time/tzdata" // zones without /usr/share/zoneinfo

	"k8s.io/apimachinery/pkg/util/validation/field"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// MaxDuration is the longest a window may stay open.
const MaxDuration = 7 * 24 * time.Hour

// The search horizon of At: windows opened up to lookBehind before now (no
// window is longer, so every window open now is among them) and openings up
// to lookAhead after it (every valid window opens at least once a week).
const (
	lookBehind = MaxDuration
	lookAhead  = 8 * 24 * time.Hour
)

// fieldPath is where the windows are in a NodePool.
var fieldPath = field.NewPath("spec", "rollout", "maintenanceWindows")

var weekdays = map[string]time.Weekday{
	"Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday, "Thu": time.Thursday,
	"Fri": time.Friday, "Sat": time.Saturday, "Sun": time.Sunday,
}

// dayNames are the values of days, in the order error messages list them.
var dayNames = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}

// Validate checks every window and returns an error for each bad field,
// named under spec.rollout.maintenanceWindows, for example
// spec.rollout.maintenanceWindows[1].timeZone for an unknown zone. It checks
// days (Mon..Sun, each once), start (HH:MM, 00:00 to 23:59), duration
// (positive, at most MaxDuration) and timeZone (an IANA name; empty is UTC;
// "Local", the zone of whatever process evaluates it, is refused).
func Validate(ws []kubefarmv1.MaintenanceWindow) field.ErrorList {
	var errs field.ErrorList
	for i, w := range ws {
		p := fieldPath.Index(i)
		seen := make(map[string]bool, len(w.Days))
		for j, d := range w.Days {
			switch _, ok := weekdays[d]; {
			case !ok:
				errs = append(errs, field.NotSupported(p.Child("days").Index(j), d, dayNames))
			case seen[d]:
				errs = append(errs, field.Duplicate(p.Child("days").Index(j), d))
			}
			seen[d] = true
		}
		if _, _, ok := parseStart(w.Start); !ok {
			errs = append(errs, field.Invalid(p.Child("start"), w.Start, "must be a time of day HH:MM from 00:00 to 23:59"))
		}
		switch d := w.Duration.Duration; {
		case d <= 0:
			errs = append(errs, field.Invalid(p.Child("duration"), d.String(), "must be positive"))
		case d > MaxDuration:
			errs = append(errs, field.Invalid(p.Child("duration"), d.String(), "must be at most 168h (7 days)"))
		}
		if _, err := location(w.TimeZone); err != nil {
			errs = append(errs, field.Invalid(p.Child("timeZone"), w.TimeZone, err.Error()))
		}
	}
	return errs
}

// State is the answer of At.
type State struct {
	// Open is whether a window is open.
	Open bool
	// Next is when Open next changes. While open, it is the earliest instant
	// at which no window is open, overlapping and adjacent windows (one
	// opening where another ends) taken as one. While closed, it is the next
	// opening. Zero when there are no windows (always open).
	//
	// Windows that stay open without a break past the search horizon (the
	// openings of the next 8 days), such as a daily 24h window, make it a
	// lower bound: open at least until Next; evaluate again then.
	Next time.Time
}

// At evaluates the windows at now. No windows means always open. Invalid
// windows (see Validate) are an error.
func At(ws []kubefarmv1.MaintenanceWindow, now time.Time) (State, error) {
	if len(ws) == 0 {
		return State{Open: true}, nil
	}
	if errs := Validate(ws); len(errs) != 0 {
		return State{}, errs.ToAggregate()
	}
	now = now.Round(0) // compare wall clocks only
	var spans []span
	for _, w := range ws {
		spans = appendSpans(spans, w, now)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.open.Compare(b.open) })
	// Sweep in order of opening: end is how far the windows open at now
	// reach without a gap; it stays now while none is.
	end := now
	for _, s := range spans {
		if s.open.After(end) {
			if end.Equal(now) {
				return State{Next: s.open}, nil
			}
			break
		}
		if s.end.After(end) {
			end = s.end
		}
	}
	if end.Equal(now) {
		// Closed with no opening ahead; valid windows always have one.
		return State{}, nil
	}
	return State{Open: true, Next: end}, nil
}

// span is one opening of a window, [open, end).
type span struct{ open, end time.Time }

// appendSpans adds the openings of w within the horizon around now. w must
// be valid.
func appendSpans(spans []span, w kubefarmv1.MaintenanceWindow, now time.Time) []span {
	loc, _ := location(w.TimeZone)
	hh, mm, _ := parseStart(w.Start)
	var days [7]bool
	for _, d := range w.Days {
		days[weekdays[d]] = true
	}
	from, to := now.Add(-lookBehind), now.Add(lookAhead)
	y, m, d := now.In(loc).Date()
	// Local days a day beyond the horizon on either side, for the zone's
	// offset and a start moved by a daylight-saving change.
	for k := -8; k <= 9; k++ {
		day := time.Date(y, m, d+k, 0, 0, 0, 0, time.UTC) // calendar arithmetic only
		if len(w.Days) != 0 && !days[day.Weekday()] {
			continue
		}
		open := localInstant(day.Year(), day.Month(), day.Day(), hh, mm, loc)
		if !open.After(from) || open.After(to) {
			continue
		}
		spans = append(spans, span{open: open, end: open.Add(w.Duration.Duration)})
	}
	return spans
}

// localInstant is when a clock in loc shows hh:mm on the given date. A time
// that a daylight-saving change skips or repeats is read with the offset in
// effect before the change (see the package comment). It assumes at most
// one change of offset in the day on either side of the date, as in every
// real zone.
func localInstant(y int, m time.Month, d, hh, mm int, loc *time.Location) time.Time {
	wall := time.Date(y, m, d, hh, mm, 0, 0, time.UTC)
	// The offset before any change near wall: the instant a day earlier is
	// before it whatever the zone's offset (at most ±14h).
	t := wall.Add(-offset(wall.Add(-24*time.Hour), loc))
	if shows(t, wall, loc) {
		return t // no change, a change later that day, or a repeated time's first occurrence
	}
	if u := wall.Add(-offset(wall.Add(24*time.Hour), loc)); shows(u, wall, loc) {
		return u // a change earlier that day
	}
	return t // skipped: the old clock shows wall then
}

// offset is loc's UTC offset at instant t.
func offset(t time.Time, loc *time.Location) time.Duration {
	_, off := t.In(loc).Zone()
	return time.Duration(off) * time.Second
}

// shows is whether a clock in loc shows wall (read as a UTC date and time)
// at instant t.
func shows(t, wall time.Time, loc *time.Location) bool {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC).Equal(wall)
}

// parseStart reads HH:MM.
func parseStart(s string) (hh, mm int, ok bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, 0, false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return 0, 0, false
		}
	}
	hh = int(s[0]-'0')*10 + int(s[1]-'0')
	mm = int(s[3]-'0')*10 + int(s[4]-'0')
	return hh, mm, hh < 24 && mm < 60
}

// locations caches loaded zones by name: time.LoadLocation reads and parses
// the zone data on every call. Only zones that load are stored, so the cache
// holds at most the zone database's few hundred names, whatever names are
// submitted.
var locations sync.Map // string → *time.Location

// location resolves a window's timeZone; empty is UTC.
func location(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		// time.LoadLocation's name for the process's own zone, not an IANA zone.
		return nil, fmt.Errorf("not an IANA time zone; name one such as Europe/Berlin")
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone; name an IANA zone such as Europe/Berlin")
	}
	locations.Store(name, loc)
	return loc, nil
}
