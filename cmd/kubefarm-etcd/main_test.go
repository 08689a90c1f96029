package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
	"github.com/kubefarm/kubefarm/internal/testing/etcdtest"
	"github.com/kubefarm/kubefarm/internal/testing/testenv"
)

// tlsFlags are the snapshot command's TLS flags.
func tlsFlags(p *etcdtest.PKI) []string {
	return []string{"--cacert", p.CA, "--cert", p.ClientCert, "--key", p.ClientKey}
}

// assertNoKeys fails if out contains any private key of p or a line of one.
func assertNoKeys(t *testing.T, p *etcdtest.PKI, what string, out []byte) {
	t.Helper()
	for _, k := range p.KeyPEMs {
		for line := range bytes.SplitSeq(k, []byte("\n")) {
			if len(line) > 20 && !bytes.HasPrefix(line, []byte("-----")) && bytes.Contains(out, line) {
				t.Errorf("%s contains private key material", what)
				return
			}
		}
	}
	if bytes.Contains(out, []byte("PRIVATE KEY")) {
		t.Errorf("%s contains a PEM private key", what)
	}
}

// member is one real etcd process with TLS client and peer authentication.
type member struct {
	name, dataDir, token string
	clientURL, peerURL   string
	cmd                  *exec.Cmd
	exited               chan error
	log                  string
}

func (m *member) initialCluster() string { return m.name + "=" + m.peerURL }

// start runs etcd on m's data directory and waits, polling with a
// deadline, until it answers a read through TLS.
func (m *member) start(t *testing.T, bin string, p *etcdtest.PKI) {
	t.Helper()
	args := []string{
		"--name", m.name, "--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", m.initialCluster(), "--initial-cluster-token", m.token, "--initial-cluster-state", "new",
		"--cert-file", p.ServerCert, "--key-file", p.ServerKey, "--trusted-ca-file", p.CA, "--client-cert-auth",
		"--peer-cert-file", p.ServerCert, "--peer-key-file", p.ServerKey, "--peer-trusted-ca-file", p.CA, "--peer-client-cert-auth",
		"--log-level", "warn",
	}
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	m.cmd = exec.Command(bin, args...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.exited = make(chan error, 1)
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(func() { m.stop(t) })

	cli := newClient(t, m.clientURL, p)
	// Two cores shared with other builds and tests: give etcd time.
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Get(ctx, "health-probe")
		cancel()
		if err == nil {
			return
		}
		select {
		case werr := <-m.exited:
			m.exited <- werr
			log, _ := os.ReadFile(m.log)
			t.Fatalf("etcd %s exited before it was ready: %v\n%s", m.name, werr, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(m.log)
			t.Fatalf("etcd %s not ready after 90s: %v\n%s", m.name, err, log)
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	select {
	case err := <-m.exited:
		m.exited <- err
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.exited:
		m.exited <- err
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		m.exited <- <-m.exited
	}
}

func newClient(t *testing.T, ep string, p *etcdtest.PKI) *clientv3.Client {
	t.Helper()
	tlsCfg, err := etcdsnapshot.TLSConfig(p.CA, p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func newMember(t *testing.T, name string) *member {
	t.Helper()
	dir := t.TempDir()
	return &member{
		name: name, dataDir: filepath.Join(dir, "data"), token: "tenants-alpha",
		clientURL: fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t)),
		peerURL:   fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t)),
		log:       filepath.Join(dir, name+".log"),
	}
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr []byte
}

func runTool(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		// Neither the pod name nor credentials of the machine running
		// the tests: each test gives what it means to.
		return strings.HasPrefix(kv, etcdsnapshot.PodNameEnv+"=") || strings.HasPrefix(kv, "AWS_")
	}), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("running %s: %v", args, err)
	}
	return r
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func touch(t *testing.T, path string, age time.Duration) {
	t.Helper()
	if err := os.WriteFile(path, []byte("not ours to delete\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotRestore runs the shipped binary against real etcd processes
// with TLS client authentication: a snapshot from the first endpoint that
// answers (a dead one listed first), its JSON result, retention in a
// directory shared with files that are not its own, an unreachable
// endpoint, corrupted and truncated snapshots refused by restore, a restore
// a second etcd starts on and serves the keys from, and a second restore
// that leaves the member's newer data alone.
func TestSnapshotRestore(t *testing.T) {
	etcdBin := etcdtest.Binary(t)
	bin := testenv.BuildBinary(t, "kubefarm-etcd")
	p := etcdtest.NewPKI(t)

	src := newMember(t, "alpha-etcd-0")
	src.start(t, etcdBin, p)
	cli := newClient(t, src.clientURL, p)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	want := map[string]string{}
	for i := range 200 {
		k, v := fmt.Sprintf("/registry/configmaps/ns/cm-%03d", i), fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i))
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	del, err := cli.Delete(ctx, "/registry/configmaps/ns/cm-007")
	if err != nil {
		t.Fatal(err)
	}
	delete(want, "/registry/configmaps/ns/cm-007")
	revision := del.Header.Revision

	const prefix = "tenants-alpha"
	dir := t.TempDir()
	old := func(day int) string { return fmt.Sprintf("%s-202001%02dT000000Z.db", prefix, day) }
	// Three older snapshots of this prefix and what retention must leave.
	for _, name := range []string{old(1), old(2), old(3)} {
		touch(t, filepath.Join(dir, name), 0)
	}
	unrelated := []string{
		"tenants-alpha-b-20200101T000000Z.db", // tenant "b" of namespace tenants-alpha
		"tenants-beta-20200101T000000Z.db",
		old(1) + ".bak",
		"notes.txt",
	}
	for _, name := range unrelated {
		touch(t, filepath.Join(dir, name), 48*time.Hour)
	}
	staleTemp := "." + old(4) + ".part"
	youngTemp := "." + old(5) + ".part"
	touch(t, filepath.Join(dir, staleTemp), time.Hour)
	touch(t, filepath.Join(dir, youngTemp), 0)
	tlog := filepath.Join(t.TempDir(), "termination-log")
	touch(t, tlog, 0)

	dead := fmt.Sprintf("https://127.0.0.1:%d", etcdtest.FreePort(t))
	snapArgs := func(endpoints string, extra ...string) []string {
		return append(append([]string{"snapshot", "--endpoints", endpoints, "--dial-timeout", "3s", "--timeout", "1m",
			"--dir", dir, "--prefix", prefix, "--termination-log", tlog}, tlsFlags(p)...), extra...)
	}

	var snapFile string
	var snapRes etcdsnapshot.SnapshotResult
	t.Run("snapshot", func(t *testing.T) {
		start := time.Now()
		r := runTool(t, bin, nil, snapArgs(dead+","+src.clientURL, "--retain", "2")...)
		took := time.Since(start)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		assertNoKeys(t, p, "stdout", r.stdout)
		assertNoKeys(t, p, "stderr", r.stderr)
		if bytes.Count(r.stdout, []byte("\n")) != 1 {
			t.Fatalf("stdout is not one line: %q", r.stdout)
		}
		dec := json.NewDecoder(bytes.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&snapRes); err != nil {
			t.Fatalf("stdout %q: %v", r.stdout, err)
		}
		if tl, _ := os.ReadFile(tlog); !bytes.Equal(tl, r.stdout) {
			t.Errorf("termination log %q, want stdout's line %q", tl, r.stdout)
		}
		at, ok := etcdsnapshot.ParseSnapshotName(prefix, snapRes.File)
		if !ok {
			t.Fatalf("file %q is not <prefix>-<time>.db", snapRes.File)
		}
		if ts, err := time.Parse(time.RFC3339, snapRes.Time); err != nil || !ts.Equal(at) {
			t.Errorf("time %q (%v), want the file name's %s", snapRes.Time, err, at)
		}
		if at.Before(start.Add(-time.Second)) || at.After(time.Now()) {
			t.Errorf("time %s is not the run's (%s)", at, start)
		}
		snapFile = filepath.Join(dir, snapRes.File)
		info, err := os.Stat(snapFile)
		if err != nil {
			t.Fatal(err)
		}
		if snapRes.Size != info.Size() || info.Mode().Perm() != 0o600 {
			t.Errorf("size %d, the file has %d bytes (mode %s)", snapRes.Size, info.Size(), info.Mode())
		}
		if snapRes.Revision != revision {
			t.Errorf("revision %d, etcd was at %d", snapRes.Revision, revision)
		}
		st, err := etcdsnapshot.Verify(snapFile, zap.NewNop())
		if err != nil {
			t.Fatalf("the kept snapshot does not verify: %v", err)
		}
		if st.TotalKey != len(want) || st.Revision != revision {
			t.Errorf("snapshot status: %d keys at revision %d, want %d at %d", st.TotalKey, st.Revision, len(want), revision)
		}
		// Retention: the two oldest of ours, oldest first, and the stale
		// temporary file; nothing else.
		if snapRes.Kept != 2 || !slices.Equal(snapRes.Deleted, []string{old(1), old(2)}) {
			t.Errorf("kept %d, deleted %q; want 2 and %q", snapRes.Kept, snapRes.Deleted, []string{old(1), old(2)})
		}
		wantDir := append([]string{snapRes.File, old(3), youngTemp}, unrelated...)
		slices.Sort(wantDir)
		if got := listDir(t, dir); !slices.Equal(got, wantDir) {
			t.Errorf("--dir holds %q, want %q", got, wantDir)
		}
		if !bytes.Contains(r.stderr, []byte(dead)) {
			t.Errorf("stderr does not say the first endpoint failed:\n%s", r.stderr)
		}
		t.Logf("snapshot of %d keys: %d bytes in %s (a dead endpoint's %s dial timeout included)", len(want), info.Size(), took.Round(time.Millisecond), "3s")
	})
	if snapFile == "" {
		t.FailNow()
	}

	t.Run("unreachable endpoint", func(t *testing.T) {
		before := listDir(t, dir)
		r := runTool(t, bin, nil, snapArgs(dead)...)
		if r.code == 0 {
			t.Fatalf("exit 0 against a dead endpoint\nstdout: %s", r.stdout)
		}
		var e struct{ Error string }
		dec := json.NewDecoder(bytes.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil || !strings.Contains(e.Error, dead) || !strings.Contains(e.Error, "status") {
			t.Errorf("stdout %q (%v): want {\"error\":...} naming %s and the step", r.stdout, err, dead)
		}
		if tl, _ := os.ReadFile(tlog); !bytes.Equal(tl, r.stdout) {
			t.Errorf("termination log %q, want %q", tl, r.stdout)
		}
		if got := listDir(t, dir); !slices.Equal(got, before) {
			t.Errorf("a failed run changed --dir: %q, was %q", got, before)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		r := runTool(t, bin, nil, snapArgs(src.clientURL, "--prefix", "../x")...)
		if r.code != 1 || !bytes.Contains(r.stdout, []byte(`--prefix \"../x\"`)) {
			t.Errorf("a prefix with a slash: exit %d, %s", r.code, r.stdout)
		}
		r = runTool(t, bin, nil, snapArgs(src.clientURL, "--retain", "0")...)
		if r.code != 1 || !bytes.Contains(r.stdout, []byte("--retain must be at least 1")) {
			t.Errorf("--retain 0: exit %d, %s", r.code, r.stdout)
		}
		absent := filepath.Join(dir, "absent")
		r = runTool(t, bin, nil, snapArgs(src.clientURL, "--dir", absent)...)
		if r.code != 1 || !bytes.Contains(r.stdout, []byte("checking --dir "+absent)) {
			t.Errorf("a missing --dir: exit %d, %s", r.code, r.stdout)
		}
	})

	// A member of a new cluster restored from the snapshot.
	dst := newMember(t, "alpha-etcd-1")
	restoreArgs := func(snapshot string, name ...string) []string {
		args := []string{"restore", "--snapshot", snapshot, "--data-dir", dst.dataDir,
			"--initial-cluster", dst.initialCluster(), "--initial-advertise-peer-urls", dst.peerURL,
			"--initial-cluster-token", dst.token, "--termination-log", tlog}
		for _, n := range name {
			args = append(args, "--name", n)
		}
		return args
	}

	t.Run("corrupted snapshots are refused", func(t *testing.T) {
		data, err := os.ReadFile(snapFile)
		if err != nil {
			t.Fatal(err)
		}
		flipped := slices.Clone(data)
		flipped[len(flipped)/2] ^= 0x10
		bad := map[string][]byte{
			"truncated.db":       data[:len(data)/2],
			"truncated-whole.db": data[:len(data)-32-4096], // whole pages, trailer cut off
			"flipped.db":         flipped,
		}
		for name, b := range bad {
			path := filepath.Join(t.TempDir(), name)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			r := runTool(t, bin, nil, restoreArgs(path, dst.name)...)
			var e struct{ Error string }
			_ = json.Unmarshal(r.stdout, &e)
			if r.code == 0 || !strings.Contains(e.Error, "verifying snapshot "+path) {
				t.Errorf("%s: exit %d, %s; want an error naming the step and file\n%s", name, r.code, r.stdout, r.stderr)
			}
			if _, err := os.Stat(dst.dataDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: the data directory exists after a refused restore: %v", name, err)
			}
			if _, err := os.Stat(etcdsnapshot.RestoreTempDir(dst.dataDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: the temporary directory is left: %v", name, err)
			}
		}
		r := runTool(t, bin, nil, restoreArgs(filepath.Join(dir, "absent.db"), dst.name)...)
		if r.code == 0 || !bytes.Contains(r.stdout, []byte("absent.db")) {
			t.Errorf("a missing snapshot: exit %d, %s", r.code, r.stdout)
		}
	})

	t.Run("a cluster that exists is never restored", func(t *testing.T) {
		// The members' init container passes the state they start with;
		// once the cluster was bootstrapped it is existing, and an empty
		// member must join rather than come back with old data.
		r := runTool(t, bin, nil, append(restoreArgs(snapFile, dst.name), "--initial-cluster-state=existing")...)
		var res etcdsnapshot.RestoreResult
		if err := json.Unmarshal(r.stdout, &res); r.code != 0 || err != nil || res.Action != etcdsnapshot.ActionSkipped {
			t.Fatalf("exit %d, stdout %s (%v); want skipped\n%s", r.code, r.stdout, err, r.stderr)
		}
		if _, err := os.Stat(dst.dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the data directory was written for an existing cluster: %v", err)
		}
		if r := runTool(t, bin, nil, append(restoreArgs(snapFile, dst.name), "--initial-cluster-state=maybe")...); r.code == 0 {
			t.Errorf("an unknown state was accepted: %s", r.stdout)
		}
	})

	t.Run("restore, then etcd serves the keys", func(t *testing.T) {
		start := time.Now()
		// As the members' init container runs it at the bootstrap.
		r := runTool(t, bin, nil, append(restoreArgs(snapFile, dst.name), "--initial-cluster-state=new")...)
		took := time.Since(start)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		var res etcdsnapshot.RestoreResult
		if err := json.Unmarshal(r.stdout, &res); err != nil || res.Action != etcdsnapshot.ActionRestored || res.Revision != revision {
			t.Fatalf("stdout %s (%v); want restored at revision %d", r.stdout, err, revision)
		}
		if tl, _ := os.ReadFile(tlog); !bytes.Equal(tl, r.stdout) {
			t.Errorf("termination log %q, want %q", tl, r.stdout)
		}
		if _, err := os.Stat(etcdsnapshot.RestoreTempDir(dst.dataDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the temporary directory is left: %v", err)
		}
		t.Logf("restore: %s", took.Round(time.Millisecond))

		dst.start(t, etcdBin, p)
		dcli := newClient(t, dst.clientURL, p)
		got, err := dcli.Get(ctx, "/registry/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != len(want) {
			t.Errorf("restored etcd has %d keys, want %d", len(got.Kvs), len(want))
		}
		for _, kv := range got.Kvs {
			if want[string(kv.Key)] != string(kv.Value) {
				t.Errorf("%s = %q, want %q", kv.Key, kv.Value, want[string(kv.Key)])
			}
		}
		if got.Header.Revision < revision {
			t.Errorf("restored etcd is at revision %d, the snapshot at %d", got.Header.Revision, revision)
		}
		// The restored member is a cluster of its own: it is itself.
		members, err := dcli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(members.Members) != 1 || members.Members[0].Name != dst.name || !slices.Equal(members.Members[0].PeerURLs, []string{dst.peerURL}) {
			t.Errorf("members %v, want only %s at %s", members.Members, dst.name, dst.peerURL)
		}
		if _, err := dcli.Put(ctx, "/registry/after-restore", "kept"); err != nil {
			t.Fatal(err)
		}
		dst.stop(t)
	})

	t.Run("a second restore leaves the member alone", func(t *testing.T) {
		// As a restarted pod's init container: --name from $POD_NAME.
		r := runTool(t, bin, []string{etcdsnapshot.PodNameEnv + "=" + dst.name}, restoreArgs(snapFile)...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		var res etcdsnapshot.RestoreResult
		if err := json.Unmarshal(r.stdout, &res); err != nil || res.Action != etcdsnapshot.ActionSkipped {
			t.Fatalf("stdout %s (%v); want skipped", r.stdout, err)
		}
		dst.start(t, etcdBin, p)
		dcli := newClient(t, dst.clientURL, p)
		got, err := dcli.Get(ctx, "/registry/after-restore")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "kept" {
			t.Errorf("the key written after the restore is gone: %v", got.Kvs)
		}
	})
}

// TestUsage: every flag of both commands is in its help, and the exit
// statuses of usage errors.
func TestUsage(t *testing.T) {
	bin := testenv.BuildBinary(t, "kubefarm-etcd")
	for cmd, flags := range map[string][]string{
		"snapshot": {"endpoints", "cacert", "cert", "key", "dial-timeout", "timeout", "dir", "prefix", "retain", "termination-log",
			"s3-bucket", "s3-endpoint", "s3-prefix", "s3-region", "s3-ca-file"},
		"restore": {"snapshot", "data-dir", "name", "initial-cluster", "initial-advertise-peer-urls", "initial-cluster-token",
			"initial-cluster-state", "termination-log"},
	} {
		r := runTool(t, bin, nil, cmd, "-h")
		if r.code != 0 {
			t.Errorf("%s -h: exit %d", cmd, r.code)
		}
		for _, f := range flags {
			if !bytes.Contains(r.stderr, []byte("  -"+f+" ")) && !bytes.Contains(r.stderr, []byte("  -"+f+"\n")) {
				t.Errorf("%s -h does not document --%s:\n%s", cmd, f, r.stderr)
			}
		}
	}
	if r := runTool(t, bin, nil); r.code != 2 || !bytes.Contains(r.stderr, []byte("kubefarm-etcd snapshot")) {
		t.Errorf("no command: exit %d, %s", r.code, r.stderr)
	}
	if r := runTool(t, bin, nil, "backup"); r.code != 2 {
		t.Errorf("unknown command: exit %d", r.code)
	}
	if r := runTool(t, bin, nil, "snapshot", "--termination-log", "", "--no-such-flag"); r.code != 2 || !bytes.HasPrefix(r.stdout, []byte(`{"error":`)) {
		t.Errorf("unknown flag: exit %d, %s", r.code, r.stdout)
	}
	// restore's default data directory is the members' (see the library's
	// TestMembersFlagsRestore) and its default name is $POD_NAME.
	r := runTool(t, bin, []string{etcdsnapshot.PodNameEnv + "=alpha-etcd-2"}, "restore", "-h")
	if !bytes.Contains(r.stderr, []byte(etcdsnapshot.DefaultDataDir)) || !bytes.Contains(r.stderr, []byte("alpha-etcd-2")) {
		t.Errorf("restore -h does not show the defaults:\n%s", r.stderr)
	}
}
