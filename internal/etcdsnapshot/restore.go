package etcdsnapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// RestoreTempDir is where Restore builds the data directory before renaming
// it into place: a hidden sibling of it, on the same file system (so the
// rename is atomic), with a fixed name so that a restore killed halfway
// finds and removes what it left.
func RestoreTempDir(dataDir string) string {
	dataDir = filepath.Clean(dataDir)
	return filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+".restore")
}

// Restore turns a snapshot into the member's data directory:
//
//   - if <data-dir>/member exists the member has data, and nothing is done:
//     a restarted pod (its init container runs again) must never replace
//     what the member wrote since the restore;
//   - a data directory with other files but no member is refused: nothing
//     tells what it is;
//   - otherwise the snapshot is verified (Verify), restored with etcdutl
//     into RestoreTempDir, fsynced, and renamed to the data directory, so
//     a crash at any point leaves either no data directory (the next run
//     starts over) or a complete one, never a half-restored directory etcd
//     would start on.
func Restore(o RestoreOptions, lg *zap.Logger) (RestoreResult, error) {
	res := RestoreResult{DataDir: o.DataDir, Snapshot: o.Snapshot}
	if err := o.Validate(); err != nil {
		return res, &StepError{Step: "flags", Err: err}
	}
	fail := func(step string, err error) (RestoreResult, error) {
		return res, &StepError{Step: step, Err: err}
	}
	dataDir := filepath.Clean(o.DataDir)
	if o.InitialClusterState == "existing" {
		res.Action = ActionSkipped
		res.Message = "the initial cluster state is existing: the cluster was bootstrapped, and a member without data joins it"
		lg.Info("cluster exists; not restoring", zap.String("dataDir", dataDir))
		return res, nil
	}
	skip, emptyDir, err := inspectDataDir(dataDir, lg)
	if err != nil {
		return res, err
	}
	if skip != "" {
		res.Action, res.Message = ActionSkipped, skip
		return res, nil
	}

	if o.S3.Enabled() {
		local := filepath.Join(o.FetchDir, o.Snapshot)
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		defer cancel()
		if err := FetchFromS3(ctx, o.S3, o.S3.Key(o.Snapshot), local, MaxFetchedSnapshot, lg); err != nil {
			return res, err
		}
		// The download served this restore only: its space goes back.
		defer func() { _ = os.Remove(local) }()
		o.Snapshot = local
	}
	st, err := Verify(o.Snapshot, lg)
	if err != nil {
		return fail("verifying snapshot "+o.Snapshot, err)
	}
	if err := restoreInto(o, dataDir, emptyDir, st, lg); err != nil {
		return res, err
	}
	res.Action, res.Revision = ActionRestored, st.Revision
	res.Message = fmt.Sprintf("restored revision %d as member %s", st.Revision, o.Name)
	lg.Info("restored", zap.String("dataDir", dataDir), zap.Int64("revision", st.Revision), zap.String("member", o.Name))
	return res, nil
}

// inspectDataDir says why a restore into dataDir is skipped (skip, when
// it holds a member already) or refused (err), and whether it is an empty
// directory, which the restore replaces.
func inspectDataDir(dataDir string, lg *zap.Logger) (skip string, emptyDir bool, err error) {
	member := filepath.Join(dataDir, "member")
	switch _, err := os.Lstat(member); {
	case err == nil:
		lg.Info("data directory already holds a member; not restoring", zap.String("dataDir", dataDir))
		return member + " exists: the member has data, which a restore never replaces", false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, &StepError{Step: "checking " + member, Err: err}
	}
	switch names, err := readDirNames(dataDir); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", false, &StepError{Step: "reading --data-dir " + dataDir, Err: err}
	case len(names) > 0:
		return "", false, &StepError{Step: "checking --data-dir " + dataDir, Err: fmt.Errorf("it holds %q but no member directory; refusing to restore over files of unknown origin", names)}
	default:
		emptyDir = true
	}
	return "", emptyDir, nil
}

// restoreInto restores the snapshot st was read from into a temporary
// directory beside dataDir and renames it into place, replacing dataDir
// only when emptyDir; a failure leaves no temporary directory behind.
func restoreInto(o RestoreOptions, dataDir string, emptyDir bool, st Status, lg *zap.Logger) error {
	fail := func(step string, err error) error {
		return &StepError{Step: step, Err: err}
	}
	tmp := RestoreTempDir(dataDir)
	if err := os.RemoveAll(tmp); err != nil {
		return fail("removing a previous attempt's "+tmp, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	lg.Info("restoring", zap.String("snapshot", o.Snapshot), zap.String("into", tmp), zap.Int64("revision", st.Revision))
	if err := snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath:        o.Snapshot,
		Name:                o.Name,
		OutputDataDir:       tmp,
		PeerURLs:            o.AdvertisePeerURLs,
		InitialCluster:      o.InitialCluster,
		InitialClusterToken: o.Token,
	}); err != nil {
		return fail("restoring snapshot "+o.Snapshot+" into "+tmp, err)
	}
	if err := syncTree(tmp); err != nil {
		return fail("fsync of the restored "+tmp, err)
	}
	// An empty data directory (created by hand, or by an image's VOLUME)
	// is replaced; os.Remove fails if a file appeared in it meanwhile.
	if emptyDir {
		if err := os.Remove(dataDir); err != nil {
			return fail("removing the empty --data-dir "+dataDir, err)
		}
	}
	if err := renameNoReplace(tmp, dataDir); err != nil {
		return fail("renaming the restored directory into place", err)
	}
	done = true
	if err := syncDir(filepath.Dir(dataDir)); err != nil {
		return fail("fsync of "+filepath.Dir(dataDir)+" after the rename", err)
	}
	return nil
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
