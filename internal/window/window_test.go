package window

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefarmv1 "github.com/kubefarm/kubefarm/api/v1alpha1"
)

// Calendar used below: 2026-06-01 is a Monday, so 06-06 is a Saturday and
// 06-07 a Sunday. Europe/Berlin changes at 01:00Z on 2026-03-29 (CET +1 to
// CEST +2) and 2026-10-25 (back); America/New_York at 07:00Z on 2026-03-08
// (EST -5 to EDT -4) and 06:00Z on 2026-11-01 (back).

func win(start string, d time.Duration, tz string, days ...string) kubefarmv1.MaintenanceWindow {
	return kubefarmv1.MaintenanceWindow{Days: days, Start: start, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

func ws(w ...kubefarmv1.MaintenanceWindow) []kubefarmv1.MaintenanceWindow { return w }

func ts(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAt(t *testing.T) {
	const h = time.Hour
	everyDay := ws(win("02:00", 3*h, ""))
	monWed := ws(win("02:00", 3*h, "", "Mon", "Wed"))
	sunNight := ws(win("22:00", 4*h, "", "Sun"))
	berlinSpring := ws(win("02:30", h, "Europe/Berlin"))
	nyTuesday := ws(win("09:00", 2*h, "America/New_York", "Tue"))
	tests := []struct {
		name     string
		ws       []kubefarmv1.MaintenanceWindow
		now      string
		wantOpen bool
		wantNext string
	}{
		// Every day against listed days.
		{"every day: before the opening", everyDay, "2026-06-03T01:59:00Z", false, "2026-06-03T02:00:00Z"},
		{"every day: at the opening", everyDay, "2026-06-03T02:00:00Z", true, "2026-06-03T05:00:00Z"},
		{"every day: a second before the end", everyDay, "2026-06-03T04:59:59Z", true, "2026-06-03T05:00:00Z"},
		{"every day: at the end", everyDay, "2026-06-03T05:00:00Z", false, "2026-06-04T02:00:00Z"},
		{"every day: on a Tuesday", everyDay, "2026-06-02T03:00:00Z", true, "2026-06-02T05:00:00Z"},
		{"Mon and Wed: closed on Tuesday", monWed, "2026-06-02T03:00:00Z", false, "2026-06-03T02:00:00Z"},
		{"Mon and Wed: open on Wednesday", monWed, "2026-06-03T03:00:00Z", true, "2026-06-03T05:00:00Z"},
		{"Mon and Wed: after Wednesday's, next Monday", monWed, "2026-06-03T05:00:00Z", false, "2026-06-08T02:00:00Z"},
		{"one day a week: next is almost a week ahead", ws(win("02:00", h, "", "Wed")), "2026-06-03T03:00:00Z", false, "2026-06-10T02:00:00Z"},

		// Past midnight the window belongs to the day it opened on.
		{"Sun 22:00+4h: Sunday before", sunNight, "2026-06-07T21:00:00Z", false, "2026-06-07T22:00:00Z"},
		{"Sun 22:00+4h: Monday 01:00", sunNight, "2026-06-08T01:00:00Z", true, "2026-06-08T02:00:00Z"},
		{"Sun 22:00+4h: Monday 02:00", sunNight, "2026-06-08T02:00:00Z", false, "2026-06-14T22:00:00Z"},
		{"Mon 22:00+4h: not open Monday 01:00", ws(win("22:00", 4*h, "", "Mon")), "2026-06-08T01:00:00Z", false, "2026-06-08T22:00:00Z"},

		// Across the week boundary: Go's (Saturday to Sunday) and ISO's (Sunday to Monday).
		{"Sat 20:00+30h: Sunday noon", ws(win("20:00", 30*h, "", "Sat")), "2026-06-07T12:00:00Z", true, "2026-06-08T02:00:00Z"},
		{"Sat 20:00+30h: Friday", ws(win("20:00", 30*h, "", "Sat")), "2026-06-05T12:00:00Z", false, "2026-06-06T20:00:00Z"},
		{"Sat and Sun 23:00+2h: Sunday 00:30", ws(win("23:00", 2*h, "", "Sat", "Sun")), "2026-06-07T00:30:00Z", true, "2026-06-07T01:00:00Z"},
		{"Sat and Sun 23:00+2h: Sunday 23:30", ws(win("23:00", 2*h, "", "Sat", "Sun")), "2026-06-07T23:30:00Z", true, "2026-06-08T01:00:00Z"},
		{"Sat and Sun 23:00+2h: Monday 01:00", ws(win("23:00", 2*h, "", "Sat", "Sun")), "2026-06-08T01:00:00Z", false, "2026-06-13T23:00:00Z"},

		// The longest window, opened almost 7 days ago.
		{"Mon 00:00+167h: Sunday 22:30", ws(win("00:00", 167*h, "", "Mon")), "2026-06-07T22:30:00Z", true, "2026-06-07T23:00:00Z"},
		{"Mon 00:00+167h: Sunday 23:30", ws(win("00:00", 167*h, "", "Mon")), "2026-06-07T23:30:00Z", false, "2026-06-08T00:00:00Z"},

		// Several windows: Next is the end of the whole open stretch.
		{"overlapping: end of the later", ws(win("01:00", 2*h, ""), win("02:30", 2*h, "")), "2026-06-03T01:30:00Z", true, "2026-06-03T04:30:00Z"},
		{"overlapping, order does not matter", ws(win("02:30", 2*h, ""), win("01:00", 2*h, "")), "2026-06-03T01:30:00Z", true, "2026-06-03T04:30:00Z"},
		{"contained: end of the outer", ws(win("01:00", 4*h, ""), win("02:00", h, "")), "2026-06-03T02:30:00Z", true, "2026-06-03T05:00:00Z"},
		{"adjacent: merged", ws(win("01:00", 2*h, ""), win("03:00", h, "")), "2026-06-03T01:30:00Z", true, "2026-06-03T04:00:00Z"},
		{"adjacent, chain of three", ws(win("01:00", 2*h, ""), win("02:30", 2*h, ""), win("04:30", h, "")), "2026-06-03T01:30:00Z", true, "2026-06-03T05:30:00Z"},
		{"a minute apart: not merged", ws(win("01:00", h, ""), win("02:01", h, "")), "2026-06-03T01:30:00Z", true, "2026-06-03T02:00:00Z"},
		{"in the gap of a minute", ws(win("01:00", h, ""), win("02:01", h, "")), "2026-06-03T02:00:30Z", false, "2026-06-03T02:01:00Z"},
		{"closed: the earliest of several openings", ws(win("06:00", h, ""), win("04:00", h, "", "Thu"), win("05:00", h, "")), "2026-06-03T03:00:00Z", false, "2026-06-03T05:00:00Z"},
		{"adjacent across zones", ws(win("01:00", 2*h, "UTC"), win("05:00", h, "Europe/Berlin")), "2026-06-03T01:30:00Z", true, "2026-06-03T04:00:00Z"},
		{"always open: Next past the horizon", ws(win("00:00", 24*h, "")), "2026-06-03T12:00:00Z", true, "2026-06-12T00:00:00Z"},

		// Europe/Berlin, spring forward on Sunday 2026-03-29: 02:30 CET does
		// not exist and the window opens at 03:30 CEST (01:30Z), for 1h.
		{"Berlin spring: the day before", berlinSpring, "2026-03-28T02:00:00Z", true, "2026-03-28T02:30:00Z"},
		{"Berlin spring: 01:45 CET", berlinSpring, "2026-03-29T00:45:00Z", false, "2026-03-29T01:30:00Z"},
		{"Berlin spring: 03:00 CEST", berlinSpring, "2026-03-29T01:00:00Z", false, "2026-03-29T01:30:00Z"},
		{"Berlin spring: 03:30 CEST", berlinSpring, "2026-03-29T01:30:00Z", true, "2026-03-29T02:30:00Z"},
		{"Berlin spring: after, next day 02:30 CEST", berlinSpring, "2026-03-29T02:30:00Z", false, "2026-03-30T00:30:00Z"},

		// Europe/Berlin, fall back on Sunday 2026-10-25 (03:00 CEST → 02:00 CET).
		// Sunday 01:00 CEST for 4h elapsed ends at 04:00 CET, not 05:00.
		{"Berlin fall: across the change", ws(win("01:00", 4*h, "Europe/Berlin", "Sun")), "2026-10-25T02:30:00Z", true, "2026-10-25T03:00:00Z"},
		{"Berlin fall: at 04:00 CET", ws(win("01:00", 4*h, "Europe/Berlin", "Sun")), "2026-10-25T03:00:00Z", false, "2026-11-01T00:00:00Z"},
		// 02:30 happens twice; the window opens at the first, CEST.
		{"Berlin fall: first 02:45", ws(win("02:30", 30*time.Minute, "Europe/Berlin")), "2026-10-25T00:45:00Z", true, "2026-10-25T01:00:00Z"},
		{"Berlin fall: second 02:30", ws(win("02:30", 30*time.Minute, "Europe/Berlin")), "2026-10-25T01:30:00Z", false, "2026-10-26T01:30:00Z"},

		// America/New_York: 09:00 on Tuesdays, EDT in June, EST in December.
		{"New York summer: 08:30 EDT", nyTuesday, "2026-06-02T12:30:00Z", false, "2026-06-02T13:00:00Z"},
		{"New York summer: 10:30 EDT", nyTuesday, "2026-06-02T14:30:00Z", true, "2026-06-02T15:00:00Z"},
		{"New York winter: 08:30 EST", nyTuesday, "2026-12-01T13:30:00Z", false, "2026-12-01T14:00:00Z"},
		{"New York winter: 10:30 EST", nyTuesday, "2026-12-01T15:30:00Z", true, "2026-12-01T16:00:00Z"},
		// Spring forward 2026-03-08: 02:30 EST does not exist; 03:30 EDT
		// (07:30Z), as in Berlin, not 01:30 EST (time.Date's answer).
		{"New York spring: 01:45 EST", ws(win("02:30", h, "America/New_York")), "2026-03-08T06:45:00Z", false, "2026-03-08T07:30:00Z"},
		{"New York spring: 03:30 EDT", ws(win("02:30", h, "America/New_York")), "2026-03-08T07:30:00Z", true, "2026-03-08T08:30:00Z"},
		// Fall back 2026-11-01: 01:30 is first at 05:30Z (EDT).
		{"New York fall: first 01:40", ws(win("01:30", 30*time.Minute, "America/New_York")), "2026-11-01T05:40:00Z", true, "2026-11-01T06:00:00Z"},
		{"New York fall: second 01:40", ws(win("01:30", 30*time.Minute, "America/New_York")), "2026-11-01T06:40:00Z", false, "2026-11-02T06:30:00Z"},

		// The zone of now does not matter, only the instant.
		{"now in another zone", everyDay, "2026-06-03T04:30:00+02:00", true, "2026-06-03T05:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := At(tt.ws, ts(t, tt.now))
			if err != nil {
				t.Fatal(err)
			}
			want := ts(t, tt.wantNext)
			if got.Open != tt.wantOpen || !got.Next.Equal(want) {
				t.Errorf("At(%s) = open %v, next %s; want open %v, next %s",
					tt.now, got.Open, got.Next.UTC().Format(time.RFC3339), tt.wantOpen, want.UTC().Format(time.RFC3339))
			}
		})
	}
}

func TestAtNoWindows(t *testing.T) {
	for _, w := range [][]kubefarmv1.MaintenanceWindow{nil, {}} {
		got, err := At(w, time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC))
		if err != nil || !got.Open || !got.Next.IsZero() {
			t.Errorf("At(%#v) = %+v, %v; want always open", w, got, err)
		}
	}
}

// TestAtElapsedDuration: a window across a daylight-saving change lasts its
// duration in elapsed time and its wall-clock end moves.
func TestAtElapsedDuration(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, day string
		wantEnd   string // local clock at the end
	}{
		{"fall back: 4h from 01:00 ends 04:00", "2026-10-25", "04:00"},
		{"spring forward: 4h from 01:00 ends 06:00", "2026-03-29", "06:00"},
		{"ordinary day: 4h from 01:00 ends 05:00", "2026-06-07", "05:00"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := time.ParseInLocation("2006-01-02 15:04", tt.day+" 01:00", berlin)
			if err != nil {
				t.Fatal(err)
			}
			got, err := At(ws(win("01:00", 4*time.Hour, "Europe/Berlin", "Sun")), d.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if !got.Open {
				t.Fatal("closed a minute after the opening")
			}
			if e := got.Next.Sub(d); e != 4*time.Hour {
				t.Errorf("open for %v, want 4h elapsed", e)
			}
			if c := got.Next.In(berlin).Format("15:04"); c != tt.wantEnd {
				t.Errorf("ends at %s local, want %s", c, tt.wantEnd)
			}
		})
	}
}

// TestAtTimeZoneDefault: an empty timeZone is UTC, not the process's zone.
func TestAtTimeZoneDefault(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	saved := time.Local
	time.Local = tokyo
	t.Cleanup(func() { time.Local = saved })

	now := time.Date(2026, 6, 3, 2, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		tz       string
		wantOpen bool
	}{
		{"", true},
		{"UTC", true},
		{"Etc/UTC", true},
		{"Asia/Tokyo", false},    // 02:00 JST is 17:00Z
		{"Europe/Berlin", false}, // 02:00 CEST is 00:00Z
	} {
		got, err := At(ws(win("02:00", time.Hour, tt.tz)), now)
		if err != nil {
			t.Fatal(err)
		}
		if got.Open != tt.wantOpen {
			t.Errorf("timeZone %q: open %v, want %v", tt.tz, got.Open, tt.wantOpen)
		}
	}
}

// TestAtHorizon: a stretch of open windows longer than the horizon is
// reported open until at least the horizon, never until an earlier end.
func TestAtHorizon(t *testing.T) {
	now := time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC)
	for _, w := range [][]kubefarmv1.MaintenanceWindow{
		ws(win("00:00", 24*time.Hour, "")),
		ws(win("00:00", MaxDuration, "", "Mon")),
		ws(win("00:00", 4*24*time.Hour, "", "Mon", "Thu"), win("00:00", 3*24*time.Hour, "", "Fri")),
	} {
		got, err := At(w, now)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Open || got.Next.Before(now.Add(lookAhead)) {
			t.Errorf("%v: open %v until %s, want open past %s", w, got.Open, got.Next, now.Add(lookAhead))
		}
	}
}

func TestLocalInstant(t *testing.T) {
	for _, tt := range []struct {
		zone         string
		date, clock  string
		want         string
		timeDateSays string // to show where time.Date differs; "" when it agrees
	}{
		{"Europe/Berlin", "2026-03-29", "02:30", "2026-03-29T01:30:00Z", ""},
		{"Europe/Berlin", "2026-03-29", "05:00", "2026-03-29T03:00:00Z", ""},
		{"Europe/Berlin", "2026-03-29", "01:59", "2026-03-29T00:59:00Z", ""},
		{"Europe/Berlin", "2026-10-25", "02:30", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"},
		{"Europe/Berlin", "2026-10-25", "03:00", "2026-10-25T02:00:00Z", ""},
		{"America/New_York", "2026-03-08", "02:30", "2026-03-08T07:30:00Z", "2026-03-08T06:30:00Z"},
		{"America/New_York", "2026-11-01", "01:30", "2026-11-01T05:30:00Z", ""},
		{"Australia/Lord_Howe", "2026-04-05", "01:45", "2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"}, // half-hour change
		{"Asia/Kolkata", "2026-06-03", "00:00", "2026-06-02T18:30:00Z", ""},
	} {
		loc, err := location(tt.zone)
		if err != nil {
			t.Fatal(err)
		}
		var y, d, hh, mm int
		var m time.Month
		day, _ := time.Parse("2006-01-02", tt.date)
		y, m, d = day.Date()
		clock, _ := time.Parse("15:04", tt.clock)
		hh, mm = clock.Hour(), clock.Minute()
		got := localInstant(y, m, d, hh, mm, loc)
		if !got.Equal(ts(t, tt.want)) {
			t.Errorf("%s %s %s = %s, want %s", tt.zone, tt.date, tt.clock, got.UTC().Format(time.RFC3339), tt.want)
		}
		td := time.Date(y, m, d, hh, mm, 0, 0, loc)
		if tt.timeDateSays != "" && !td.Equal(ts(t, tt.timeDateSays)) {
			t.Errorf("%s %s %s: time.Date now says %s (the comment in this package may be stale)", tt.zone, tt.date, tt.clock, td.UTC().Format(time.RFC3339))
		}
	}
}

func TestValidate(t *testing.T) {
	ok := win("02:00", time.Hour, "Europe/Berlin", "Mon")
	tests := []struct {
		name string
		ws   []kubefarmv1.MaintenanceWindow
		want []string // each must appear in the single error; nil = valid
	}{
		{"none", nil, nil},
		{"valid", ws(ok, win("23:59", MaxDuration, ""), win("00:00", time.Minute, "UTC", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")), nil},
		{"unknown zone", ws(ok, win("02:00", time.Hour, "Mars/Olympus")),
			[]string{"spec.rollout.maintenanceWindows[1].timeZone", `"Mars/Olympus"`, "unknown time zone"}},
		{"Local is not a zone", ws(win("02:00", time.Hour, "Local")),
			[]string{"spec.rollout.maintenanceWindows[0].timeZone", `"Local"`}},
		{"zone name in the wrong case", ws(win("02:00", time.Hour, "europe/berlin")),
			[]string{"spec.rollout.maintenanceWindows[0].timeZone"}},
		{"path out of the zone directory", ws(win("02:00", time.Hour, "../../etc/passwd")),
			[]string{"spec.rollout.maintenanceWindows[0].timeZone"}},
		{"start 24:00", ws(ok, ok, win("24:00", time.Hour, "")),
			[]string{"spec.rollout.maintenanceWindows[2].start", `"24:00"`, "HH:MM"}},
		{"start minute 60", ws(win("07:60", time.Hour, "")), []string{"[0].start"}},
		{"start one-digit hour", ws(win("7:30", time.Hour, "")), []string{"[0].start"}},
		{"start without colon", ws(win("0730", time.Hour, "")), []string{"[0].start"}},
		{"start with seconds", ws(win("07:30:00", time.Hour, "")), []string{"[0].start"}},
		{"start empty", ws(win("", time.Hour, "")), []string{"[0].start"}},
		{"start sign", ws(win("-1:30", time.Hour, "")), []string{"[0].start"}},
		{"zero duration", ws(ok, win("02:00", 0, "")),
			[]string{"spec.rollout.maintenanceWindows[1].duration", `"0s"`, "must be positive"}},
		{"negative duration", ws(win("02:00", -time.Hour, "")), []string{"[0].duration", "must be positive"}},
		{"longer than a week", ws(win("02:00", MaxDuration+time.Second, "")),
			[]string{"spec.rollout.maintenanceWindows[0].duration", `"168h0m1s"`, "at most 168h"}},
		{"unknown day", ws(ok, win("02:00", time.Hour, "", "Mon", "Monday")),
			[]string{"spec.rollout.maintenanceWindows[1].days[1]", `"Monday"`, `"Sun"`}},
		{"day in lower case", ws(win("02:00", time.Hour, "", "mon")), []string{"[0].days[0]"}},
		{"day twice", ws(win("02:00", time.Hour, "", "Tue", "Wed", "Tue")),
			[]string{"spec.rollout.maintenanceWindows[0].days[2]", "Duplicate value", `"Tue"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := Validate(tt.ws)
			if tt.want == nil {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("got %d errors (%v), want 1", len(errs), errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("%q does not mention %q", errs[0].Error(), w)
				}
			}
			// At refuses what Validate refuses.
			if _, err := At(tt.ws, time.Date(2026, 6, 3, 0, 0, 0, 0, time.UTC)); err == nil || !strings.Contains(err.Error(), errs[0].Field) {
				t.Errorf("At: %v, want an error naming %s", err, errs[0].Field)
			}
		})
	}
}

// TestValidateEveryError: every bad field is named, not only the first.
func TestValidateEveryError(t *testing.T) {
	errs := Validate(ws(
		win("02:00", time.Hour, ""),
		win("25:00", 0, "Mars/Olympus", "Funday"),
	))
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{
		"spec.rollout.maintenanceWindows[1].days[0]",
		"spec.rollout.maintenanceWindows[1].start",
		"spec.rollout.maintenanceWindows[1].duration",
		"spec.rollout.maintenanceWindows[1].timeZone",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("fields %v, want %v", got, want)
	}
}

// TestLocationCache: loaded zones are cached, failures are not (so the cache
// cannot be grown by submitting names).
func TestLocationCache(t *testing.T) {
	a, err := location("Asia/Kathmandu")
	if err != nil {
		t.Fatal(err)
	}
	b, err := location("Asia/Kathmandu")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the zone was loaded twice")
	}
	if _, ok := locations.Load("Asia/Kathmandu"); !ok {
		t.Error("a loaded zone is not cached")
	}
	if _, err := location("No/Such_Zone"); err == nil {
		t.Fatal("an unknown zone loaded")
	}
	if _, ok := locations.Load("No/Such_Zone"); ok {
		t.Error("an unknown zone was cached")
	}
	if loc, err := location(""); err != nil || loc != time.UTC {
		t.Errorf("empty zone: %v, %v; want UTC", loc, err)
	}
}
