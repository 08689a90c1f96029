package etcdsnapshot

import (
	"strings"
	"testing"
	"time"
)

func TestValidatePrefix(t *testing.T) {
	cases := []struct {
		prefix string
		ok     bool
	}{
		{"tenants-alpha", true},
		{"a", true},
		{"ns.with.dots-name", true},
		{"0abc9", true},
		{strings.Repeat("a", MaxPrefixLen), true},
		{strings.Repeat("a", MaxPrefixLen+1), false},
		{"", false},
		{"a/b", false},
		{"../etc", false},
		{".hidden", false},
		{"-dash", false},
		{"dash-", false},
		{"Upper", false},
		{"sp ace", false},
		{"a_b", false},
		{"a*", false},
		{"a\x00b", false},
	}
	for _, tt := range cases {
		err := ValidatePrefix(tt.prefix)
		if (err == nil) != tt.ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok=%v", tt.prefix, err, tt.ok)
		}
	}
}

func TestSnapshotNames(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("CET", 3600))
	if got, want := SnapshotName("tenants-alpha", at), "tenants-alpha-20260304T040607Z.db"; got != want {
		t.Errorf("SnapshotName = %q, want %q (UTC, seconds)", got, want)
	}
	if got, want := TempName("tenants-alpha", at), ".tenants-alpha-20260304T040607Z.db.part"; got != want {
		t.Errorf("TempName = %q, want %q", got, want)
	}
	want := at.UTC().Truncate(time.Second)
	if got, ok := ParseSnapshotName("tenants-alpha", SnapshotName("tenants-alpha", at)); !ok || !got.Equal(want) {
		t.Errorf("ParseSnapshotName(SnapshotName) = %v, %v, want %v", got, ok, want)
	}
	if got, ok := ParseTempName("tenants-alpha", TempName("tenants-alpha", at)); !ok || !got.Equal(want) {
		t.Errorf("ParseTempName(TempName) = %v, %v, want %v", got, ok, want)
	}
}

func TestParseSnapshotName(t *testing.T) {
	const prefix = "a"
	cases := []struct {
		name string
		ok   bool
	}{
		{"a-20260101T000000Z.db", true},
		{"a-20261231T235959Z.db", true},
		// Another tenant whose prefix starts with this one's.
		{"a-b-20260101T000000Z.db", false},
		{"ab-20260101T000000Z.db", false},
		{"b-20260101T000000Z.db", false},
		{"a-20260101T000000Z.db.bak", false},
		{"a-20260101T000000Z.DB", false},
		{"a-20260101T000000Z", false},
		{".a-20260101T000000Z.db.part", false},
		{"a-2026011T000000Z.db", false},
		{"a-20260101T000000.db", false},
		{"a-20261301T000000Z.db", false},  // month 13
		{"a-20260230T000000Z.db", false},  // 30 February
		{"a-20260101T246000Z.db", false},  // hour 24
		{"a-20260101t000000z.db", false},  // lowercase
		{"a-+0260101T000000Z.db", false},  // a sign is not a digit
		{"a-20260101T000000Z.db/", false}, // not a file name
		{"a-", false},
		{"", false},
	}
	for _, tt := range cases {
		if _, ok := ParseSnapshotName(prefix, tt.name); ok != tt.ok {
			t.Errorf("ParseSnapshotName(%q, %q) ok = %v, want %v", prefix, tt.name, ok, tt.ok)
		}
	}
}

func TestParseTempName(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{".a-20260101T000000Z.db.part", true},
		{"a-20260101T000000Z.db.part", false},
		{".a-20260101T000000Z.db", false},
		{".a-b-20260101T000000Z.db.part", false},
		{"..a-20260101T000000Z.db.part", false},
	}
	for _, tt := range cases {
		if _, ok := ParseTempName("a", tt.name); ok != tt.ok {
			t.Errorf("ParseTempName(a, %q) ok = %v, want %v", tt.name, ok, tt.ok)
		}
	}
}
