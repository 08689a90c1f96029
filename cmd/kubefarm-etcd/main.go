// Command kubefarm-etcd backs up and restores the etcd of a tenant control
// plane (docs/etcd.md, "Backup and restore tool"). It ships in the
// kubefarm-manager image, beside the manager.
//
//	kubefarm-etcd snapshot --endpoints ... --cacert ... --cert ... --key ... --prefix ns-name
//	kubefarm-etcd restore --snapshot /backup/ns-name-20260101T000000Z.db --initial-cluster ... ...
//
// snapshot is what the per-tenant CronJob runs: one verified snapshot into
// --dir, with its key file (--keys-config sealed to --keys-recipients),
// then retention; with --s3-bucket the snapshot is then uploaded to
// an S3-compatible bucket (credentials from $AWS_ACCESS_KEY_ID and
// $AWS_SECRET_ACCESS_KEY only) and retention applies there. restore is what each etcd member's init container
// runs when a TenantCluster is created from a snapshot: it builds the data
// directory once and never touches one that holds a member.
//
// Each run prints one JSON line to stdout (logs go to stderr) and, in a
// pod, writes the same line to the termination log, where the controller
// reads it from the container's status: the result, or {"error":"..."}.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"filippo.io/age"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kubefarm/kubefarm/internal/backupkeys"
	"github.com/kubefarm/kubefarm/internal/etcdsnapshot"
	"github.com/kubefarm/kubefarm/internal/s3target"
)

const usage = `kubefarm-etcd backs up and restores the etcd of a kubefarm tenant control plane.

Usage:
  kubefarm-etcd snapshot [flags]   take a verified snapshot into --dir (and an S3 bucket), then apply retention
  kubefarm-etcd restore [flags]    build an etcd member's data directory from a snapshot, once
  kubefarm-etcd restore-check [flags]
                                   check that a snapshot and its key file can be restored, without restoring

Run "kubefarm-etcd <command> -h" for a command's flags. Each run prints one
JSON line to stdout and writes it to --termination-log; logs go to stderr.
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// run is the whole command, with its outside world passed in.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "snapshot":
		return runSnapshot(ctx, args[1:], stdout, stderr, getenv)
	case "restore":
		return runRestore(args[1:], stdout, stderr, getenv)
	case "restore-check":
		return runRestoreCheck(ctx, args[1:], stdout, stderr, getenv)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("kubefarm-etcd snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o etcdsnapshot.SnapshotOptions
	var endpoints, tlog string
	fs.StringVar(&endpoints, "endpoints", "",
		"etcd client URLs, comma-separated, each https://host:port (required). They are tried in order and the snapshot "+
			"is streamed from the first that answers a Status call within --dial-timeout; a snapshot is one member's state, "+
			"so it never switches members midway")
	fs.StringVar(&o.CACert, "cacert", "", "PEM file of the CA that signed etcd's serving certificates (required)")
	fs.StringVar(&o.Cert, "cert", "", "PEM file of the client certificate etcd's --client-cert-auth accepts (required)")
	fs.StringVar(&o.Key, "key", "", "PEM file of the client certificate's private key (required; never logged)")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", etcdsnapshot.DefaultDialTimeout,
		"how long each endpoint has to connect and answer the Status call before the next one is tried")
	fs.DurationVar(&o.Timeout, "timeout", etcdsnapshot.DefaultTimeout,
		"bound on the whole run: choosing an endpoint, streaming, verifying, retention. Temporary files of --prefix "+
			"older than this are left by dead runs, and retention deletes them")
	fs.StringVar(&o.Dir, "dir", etcdsnapshot.DefaultDir,
		"directory of the snapshots (it must exist). A snapshot is streamed into a hidden temporary file there, "+
			"verified, then renamed to <prefix>-<UTC time as 20060102T150405Z>.db")
	fs.StringVar(&o.Prefix, "prefix", "",
		"start of the snapshot file names, such as the tenant's <namespace>-<name> (required): lowercase letters, digits, "+
			"'-' and '.', starting and ending with a letter or digit, at most 200 bytes")
	fs.IntVar(&o.Retain, "retain", etcdsnapshot.DefaultRetain,
		"how many snapshots of --prefix to keep, the new one included (at least 1): older ones are deleted, and only "+
			"files named exactly <prefix>-<time>.db count; nothing else in --dir is touched")
	fs.StringVar(&o.S3.Bucket, "s3-bucket", "",
		"S3 bucket to upload each verified snapshot to (optional; the other --s3-* flags need it): S3 bucket name rules, "+
			"3 to 63 lowercase letters, digits, '.' and '-'. The snapshot is first saved in --dir as without it, then "+
			"uploaded (Content-MD5 checked by the server), its size checked, and retention applied in the bucket, which "+
			"the result's kept and deleted then describe. Credentials come only from the environment: $"+
			s3target.EnvAccessKeyID+" and $"+s3target.EnvSecretAccessKey+" (required), $"+s3target.EnvSessionToken+
			" (optional); they are never logged")
	fs.StringVar(&o.S3.Endpoint, "s3-endpoint", "",
		"S3 endpoint, https://host[:port] or http://host[:port] and nothing after it (required with --s3-bucket); "+
			"path- or virtual-host-style bucket addressing is chosen as the endpoint supports")
	fs.StringVar(&o.S3.Prefix, "s3-prefix", "",
		"start of the object keys: the key is <s3-prefix><prefix>-<time>.db. Empty, or ending in '/', without a "+
			"leading '/', \"//\", '.' or '..' segments; letters, digits, '.', '_', '-' and '/', at most 256 bytes. "+
			"Retention counts only objects under it named exactly as the snapshots are")
	fs.StringVar(&o.S3.Region, "s3-region", "", "the bucket's S3 region (optional; empty lets the client find it)")
	fs.StringVar(&o.S3.CAFile, "s3-ca-file", "",
		"PEM file of the CAs the https endpoint's certificate is checked against, instead of the system roots "+
			"(optional; an error with an http endpoint)")
	fs.StringVar(&o.KeysConfig, "keys-config", "",
		"the tenant's rendered EncryptionConfiguration (JSON, the <tenant>-encryption-config Secret's "+
			"encryption-configuration.json). With it each snapshot is stored whole: the keys its Secrets were encrypted "+
			"with are sealed (age) to --keys-recipients into <snapshot>"+etcdsnapshot.KeysSuffix+" beside it, uploaded "+
			"before it with --s3-bucket, and deleted with it by retention. The run fails, and keeps no snapshot, when "+
			"these keys do not decrypt every encrypted value the snapshot holds. Needs --keys-recipients")
	fs.StringVar(&o.KeysRecipients, "keys-recipients", "",
		"file of age X25519 recipients (age1...), one per line, '#' comments and blank lines skipped: the backup key "+
			"the key file is sealed to, whose identity alone opens it (age -d -i). Needs --keys-config")
	fs.StringVar(&tlog, "termination-log", etcdsnapshot.DefaultTerminationLog,
		"file that also gets the JSON result line (at most 4000 bytes), written only if it exists and is writable, as "+
			"the kubelet's termination log in a container; empty disables it")
	if code, done := parse(fs, args, stdout, stderr, &tlog); done {
		return code
	}
	o.S3.Credentials = s3Credentials(getenv)
	var err error
	if o.Endpoints, err = etcdsnapshot.ParseEndpoints(endpoints); err != nil {
		return report(stdout, stderr, tlog, etcdsnapshot.ErrorLine(err), exitFailed)
	}
	lg := newLogger(stderr)
	defer func() { _ = lg.Sync() }()
	// SIGTERM (a Job's deadline, a deleted pod) cancels the stream, so the
	// run removes its temporary file and reports the error before it
	// exits. restore does not catch signals: etcdutl's restore cannot be
	// cancelled, and the next run removes what a killed one left.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	res, err := etcdsnapshot.Save(ctx, o, lg)
	if err != nil {
		lg.Error("snapshot failed", zap.Error(err))
		return report(stdout, stderr, tlog, etcdsnapshot.ErrorLine(err), exitFailed)
	}
	fmt.Fprint(stdout, string(res.Line()))
	return report(nil, stderr, tlog, res.TerminationLine(), exitOK)
}

func runRestore(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("kubefarm-etcd restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o etcdsnapshot.RestoreOptions
	var advertise, tlog string
	fs.StringVar(&o.Snapshot, "snapshot", "",
		"snapshot file to restore, as kubefarm-etcd snapshot or etcdctl snapshot save wrote it (required; verified "+
			"before use, and a missing file is an error unless the data directory already holds a member)")
	fs.StringVar(&o.DataDir, "data-dir", etcdsnapshot.DefaultDataDir,
		"the member's etcd --data-dir. If <data-dir>/member exists nothing is done (exit 0): a restarted pod never "+
			"overwrites its data. Otherwise the snapshot is restored into a hidden sibling directory and renamed to this")
	fs.StringVar(&o.Name, "name", getenv(etcdsnapshot.PodNameEnv),
		"the member's etcd --name (default: $"+etcdsnapshot.PodNameEnv+", as in the members' pod template)")
	fs.StringVar(&o.InitialCluster, "initial-cluster", "",
		"the members' etcd --initial-cluster, name=peerURL,... (required; every member restores with the same value)")
	fs.StringVar(&advertise, "initial-advertise-peer-urls", "",
		"the member's etcd --initial-advertise-peer-urls, comma-separated (required; spelled exactly as its "+
			"URLs in --initial-cluster)")
	fs.StringVar(&o.Token, "initial-cluster-token", "",
		"the members' etcd --initial-cluster-token (required; kubefarm uses <namespace>-<name>). It seeds the "+
			"restored cluster's ID, so every member must get the same value")
	fs.StringVar(&o.InitialClusterState, "initial-cluster-state", "",
		"the member's etcd initial cluster state: new (or empty) restores; existing does nothing (exit 0), since a "+
			"bootstrapped cluster's member without data must join it, not start from the snapshot")
	fs.StringVar(&tlog, "termination-log", etcdsnapshot.DefaultTerminationLog,
		"file that also gets the JSON result line (at most 4000 bytes), written only if it exists and is writable, as "+
			"the kubelet's termination log in a container; empty disables it")
	addS3FetchFlags(fs, &o.S3)
	fs.StringVar(&o.FetchDir, "fetch-dir", "",
		"with --s3-bucket: the directory the snapshot is downloaded into, only when a restore will happen, and removed from after it")
	if code, done := parse(fs, args, stdout, stderr, &tlog); done {
		return code
	}
	o.S3.Credentials = s3Credentials(getenv)
	o.AdvertisePeerURLs = etcdsnapshot.SplitList(advertise)
	lg := newLogger(stderr)
	defer func() { _ = lg.Sync() }()
	res, err := etcdsnapshot.Restore(o, lg)
	if err != nil {
		lg.Error("restore failed", zap.Error(err))
		return report(stdout, stderr, tlog, etcdsnapshot.ErrorLine(err), exitFailed)
	}
	return report(stdout, stderr, tlog, res.Line(), exitOK)
}

func runRestoreCheck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("kubefarm-etcd restore-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var snapshot, keys, identity, keysConfig, tlog, fetchDir string
	var reseal bool
	var s3o etcdsnapshot.S3Options
	addS3FetchFlags(fs, &s3o)
	fs.StringVar(&fetchDir, "fetch-dir", os.TempDir(), "with --s3-bucket: the directory the snapshot and its key file are downloaded into")
	fs.StringVar(&snapshot, "snapshot", "", "snapshot file, as kubefarm-etcd snapshot wrote it (required)")
	fs.StringVar(&keys, "keys", "", "its key file (default: the snapshot's name followed by "+etcdsnapshot.KeysSuffix+")")
	fs.StringVar(&identity, "identity", "",
		"file of the backup key's age identities (AGE-SECRET-KEY-1..., one per line; required; never printed)")
	fs.StringVar(&tlog, "termination-log", etcdsnapshot.DefaultTerminationLog,
		"file that also gets the JSON result line, written only if it exists and is writable; empty disables it")
	fs.StringVar(&keysConfig, "keys-config", "",
		"instead of --identity and a key file: an EncryptionConfiguration (JSON, as kubefarm renders a key Secret) whose keys "+
			"must decrypt the snapshot's values, for keys supplied by hand")
	fs.BoolVar(&reseal, "reseal", false,
		"on success, add the keys to the result sealed to --identity's own recipients (\"sealed\", base64): how a restore hands them to kubefarm")
	if code, done := parse(fs, args, stdout, stderr, &tlog); done {
		return code
	}
	s3o.Credentials = s3Credentials(getenv)
	var ids []age.Identity
	err := errors.New("--snapshot and one of --identity and --keys-config are required")
	switch {
	case snapshot == "" || (identity == "") == (keysConfig == ""):
	case keysConfig != "" && (keys != "" || reseal):
		err = errors.New("--keys-config checks keys in the clear: --keys and --reseal are for a key file")
	case keysConfig != "":
		err = nil
	default:
		ids, err = etcdsnapshot.ReadIdentities(identity)
	}
	if err == nil && s3o.Enabled() {
		err = errors.Join(s3o.Validate(), etcdsnapshot.ValidateFetchName(snapshot))
	}
	if err != nil {
		return report(stdout, stderr, tlog, etcdsnapshot.ErrorLine(err), exitUsage)
	}
	lg := newLogger(stderr)
	defer func() { _ = lg.Sync() }()
	if s3o.Enabled() {
		name := snapshot
		if snapshot, keys, err = etcdsnapshot.FetchPair(ctx, s3o, name, fetchDir, lg); err != nil {
			return report(stdout, stderr, tlog, etcdsnapshot.CheckLine(s3o.Key(name), s3o.Key(etcdsnapshot.KeysName(name)), backupkeys.Keys{}, err), exitFailed)
		}
	}
	if keysConfig != "" {
		k, err := etcdsnapshot.PreflightConfig(snapshot, keysConfig, lg)
		code := exitOK
		if err != nil {
			code = exitFailed
		}
		return report(stdout, stderr, tlog, etcdsnapshot.CheckLine(snapshot, keysConfig, k, err), code)
	}
	if keys == "" {
		keys = etcdsnapshot.KeysName(snapshot)
	}
	k, err := etcdsnapshot.Preflight(snapshot, keys, lg, ids...)
	if err != nil {
		return report(stdout, stderr, tlog, etcdsnapshot.CheckLine(snapshot, keys, k, err), exitFailed)
	}
	if !reseal {
		return report(stdout, stderr, tlog, etcdsnapshot.CheckLine(snapshot, keys, k, nil), exitOK)
	}
	line, err := etcdsnapshot.ResealedCheckLine(snapshot, keys, k, recipientsOf(ids))
	if err != nil {
		return report(stdout, stderr, tlog, etcdsnapshot.CheckLine(snapshot, keys, k, err), exitFailed)
	}
	return report(stdout, stderr, tlog, line, exitOK)
}

// addS3FetchFlags registers where restore and restore-check download a
// snapshot from instead of reading a file.
func addS3FetchFlags(fs *flag.FlagSet, o *etcdsnapshot.S3Options) {
	fs.StringVar(&o.Bucket, "s3-bucket", "",
		"S3 bucket to download the snapshot from (optional; --snapshot is then its name after --s3-prefix, and the other "+
			"--s3-* flags need it). Credentials come only from the environment: $"+s3target.EnvAccessKeyID+" and $"+
			s3target.EnvSecretAccessKey+" (required), $"+s3target.EnvSessionToken+" (optional); never logged")
	fs.StringVar(&o.Endpoint, "s3-endpoint", "", "S3 endpoint, https://host[:port] or http://host[:port] (required with --s3-bucket)")
	fs.StringVar(&o.Prefix, "s3-prefix", "", "start of the object keys: the snapshot is <s3-prefix><snapshot>, its key file <s3-prefix><snapshot>"+etcdsnapshot.KeysSuffix)
	fs.StringVar(&o.Region, "s3-region", "", "the bucket's S3 region (optional; empty lets the client find it)")
	fs.StringVar(&o.CAFile, "s3-ca-file", "", "PEM file of the CAs the https endpoint's certificate is checked against (optional)")
}

// s3Credentials reads the S3 credentials from the environment, their only
// source.
func s3Credentials(getenv func(string) string) etcdsnapshot.S3Credentials {
	return etcdsnapshot.S3Credentials{
		AccessKeyID:     getenv(s3target.EnvAccessKeyID),
		SecretAccessKey: getenv(s3target.EnvSecretAccessKey),
		SessionToken:    getenv(s3target.EnvSessionToken),
	}
}

// recipientsOf are the recipients of the X25519 identities among ids (the
// only kind kubefarm's backup key Secret holds; others are skipped).
func recipientsOf(ids []age.Identity) []age.Recipient {
	var out []age.Recipient
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok {
			out = append(out, x.Recipient())
		}
	}
	return out
}

// parse parses a subcommand's flags; done says the run ends here, with
// code: help was asked for, or the command line is wrong (reported as a
// result line, also to the termination log the flags name).
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, tlog *string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return report(stdout, stderr, *tlog, etcdsnapshot.ErrorLine(err), exitUsage), true
	}
	if fs.NArg() > 0 {
		return report(stdout, stderr, *tlog, etcdsnapshot.ErrorLine(fmt.Errorf("unexpected arguments %q", fs.Args())), exitUsage), true
	}
	return 0, false
}

// report prints line to stdout (when given) and writes it to the
// termination log; a termination log that cannot be written is said on
// stderr but does not change the exit status, which is the run's.
func report(stdout, stderr io.Writer, tlog string, line []byte, code int) int {
	if stdout != nil {
		fmt.Fprint(stdout, string(line))
	}
	if err := etcdsnapshot.WriteTerminationLog(tlog, line); err != nil {
		fmt.Fprintf(stderr, "writing the termination log %s: %v\n", tlog, err)
	}
	return code
}

// newLogger logs JSON to stderr at info; stdout is the result line's.
func newLogger(stderr io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(stderr), zap.InfoLevel)
	return zap.New(core).Named("kubefarm-etcd")
}
