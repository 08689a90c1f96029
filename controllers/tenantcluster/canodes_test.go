package tenantcluster_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/kubefarm/kubefarm/api/v1alpha1"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster"
	"github.com/kubefarm/kubefarm/controllers/tenantcluster/desired"
)

// bootMachine writes the status kubefarm-pxe writes for a boot: its
// secret issued at issued, the boot reported, its Node Ready, and
// RebootRequired False for the new boot.
func bootMachine(ctx context.Context, key types.NamespacedName, bootID string, issued time.Time) error {
	// The manager's Machine controllers (its removal finalizer, say)
	// write the Machine too.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return writeBoot(ctx, key, bootID, issued) })
}

func writeBoot(ctx context.Context, key types.NamespacedName, bootID string, issued time.Time) error {
	m := &v1alpha1.Machine{}
	if err := env.Client.Get(ctx, key, m); err != nil {
		return err
	}
	m.Status.BootCredential = &v1alpha1.BootCredential{SHA256: "sha256:" + fmt.Sprintf("%064x", issued.Unix()), Issued: metav1.NewTime(issued)}
	m.Status.LastBoot = &v1alpha1.BootRecord{BootID: bootID, ImageDigest: "sha256:" + fmt.Sprintf("%064d", 1), Time: metav1.NewTime(issued.Add(time.Minute))}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionNodeReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonNodeReady, Message: "node " + key.Name})
	meta.RemoveStatusCondition(&m.Status.Conditions, v1alpha1.ConditionRebootRequired)
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRebootRequired, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonNewBoot, Message: v1alpha1.BootMessage(bootID, "")})
	return env.Client.Status().Update(ctx, m)
}

// rebootAskedFor tells whether m carries the rotation's RebootRequired for
// boot bootID.
func rebootAskedFor(ctx context.Context, key types.NamespacedName, bootID string) (bool, error) {
	m := &v1alpha1.Machine{}
	if err := env.Client.Get(ctx, key, m); err != nil {
		return false, err
	}
	c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionRebootRequired)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonClusterCARotation && v1alpha1.OfBoot(c, bootID), nil
}

// leafSignedBy tells whether role's certificate is signed by ca.
func leafSignedBy(ctx context.Context, t *testing.T, key types.NamespacedName, role desired.PKIRole, ca *x509.Certificate) (bool, error) {
	d, err := secretData(ctx, key.Namespace, key.Name+"-"+string(role))
	if err != nil {
		return false, err
	}
	return pemCerts(t, d["tls.crt"])[0].CheckSignatureFrom(ca) == nil, nil
}

// checkClusterCARotation rotates the cluster CA of a tenant with two
// Machines: the new CA signs the client leaves first while the API
// server's serving certificate stays with the old one; the Machines booted
// before are asked to reboot and the rotation waits for every one still
// running; once both rebooted the serving leaves move, the old CA is
// dropped and deleted.
func checkClusterCARotation(ctx context.Context, t *testing.T, key types.NamespacedName, markReady func(context.Context) error) {
	ns := key.Namespace
	oldCA, err := secretData(ctx, ns, key.Name+"-ca")
	if err != nil {
		t.Fatal(err)
	}
	oldCert := pemCerts(t, oldCA["tls.crt"])[0]
	booted := time.Now().Add(-time.Hour)
	var machines []types.NamespacedName
	for i := range 2 {
		name := fmt.Sprintf("%s-node-%d", key.Name, i)
		m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.LabelTenantCluster: key.Name}},
			Spec: v1alpha1.MachineSpec{Pool: "workers", Cluster: key.Name, Hostname: name, IP: fmt.Sprintf("10.71.0.%d", i+1),
				MACs: []string{fmt.Sprintf("02:00:00:71:00:%02x", i+1)}, DesiredImage: "img"}}
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		machines = append(machines, client.ObjectKeyFromObject(m))
		if err := bootMachine(ctx, machines[i], "boot-a", booted); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := getTC(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Annotations[desired.RotateCAAnnotation(desired.RoleCA)] = "2026-11-28"
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}

	// The clients move; the serving leaves, which the nodes booted with
	// only the old CA verify, stay; both Machines are asked to reboot.
	var newCert *x509.Certificate
	poll(ctx, t, "the cluster CA waits for the nodes' reboots", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := markReady(ctx); err != nil {
			return false, "", err
		}
		rec, s, err := caRecord(ctx, key, desired.RoleCA)
		if err != nil || rec == nil {
			return false, "no record yet", err
		}
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		if rec.Signer == 2 && rec.Serving == 0 {
			return false, "", fmt.Errorf("the new CA serves before the nodes rebooted: %+v", *rec)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCARotated)
		if rec.NodesSince.IsZero() || c == nil || c.Reason != string(desired.CAStepWaitNodes) {
			return false, fmt.Sprintf("record %+v %s", *rec, conditionsString(got)), nil
		}
		newCert = pemCerts(t, s.Data["tls.crt"])[1]
		for _, m := range machines {
			if asked, err := rebootAskedFor(ctx, m, "boot-a"); err != nil || !asked {
				return false, fmt.Sprintf("Machine %s not asked to reboot yet", m.Name), err
			}
		}
		return true, "", nil
	})
	for role, wantNew := range map[desired.PKIRole]bool{desired.RoleScheduler: true, desired.RoleAdmin: true, desired.RoleAPIServer: false, desired.RoleKonnectivityServer: false} {
		byNew, err := leafSignedBy(ctx, t, key, role, newCert)
		if err != nil {
			t.Fatal(err)
		}
		if byNew != wantNew {
			t.Errorf("waiting for the nodes: %s signed by the new CA %v, want %v", role, byNew, wantNew)
		}
	}

	// One Machine reboots: the rotation still waits, for the other.
	if err := bootMachine(ctx, machines[0], "boot-b", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the rotation names the Machine left", time.Minute, func(ctx context.Context) (bool, string, error) {
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCARotated)
		if c == nil || c.Reason != string(desired.CAStepWaitNodes) {
			return false, "", fmt.Errorf("one Machine left to reboot: %s", conditionsString(got))
		}
		want := "ca: waiting for the reboot of 1 Machine(s) booted before the new CA signed (RebootRequired, through their pools' rollout): " + machines[1].Name + ";"
		return strings.HasPrefix(c.Message, want), c.Message, nil
	})
	if asked, err := rebootAskedFor(ctx, machines[0], "boot-b"); err != nil || asked {
		t.Errorf("the rebooted Machine is asked to reboot again: %v %v", asked, err)
	}

	// The other reboots: the serving leaves move, the old CA goes.
	if err := bootMachine(ctx, machines[1], "boot-b", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "cluster CA rotation finished", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := markReady(ctx); err != nil {
			return false, "", err
		}
		rec, _, err := caRecord(ctx, key, desired.RoleCA)
		if err != nil {
			return false, "", err
		}
		servingNew, err := leafSignedBy(ctx, t, key, desired.RoleAPIServer, newCert)
		if err != nil {
			return false, "", err
		}
		if servingNew && len(rec.Trusted) != 2 && !slices.Equal(rec.Trusted, []int{2}) {
			return false, "", fmt.Errorf("serving from the new CA with record %+v", *rec)
		}
		_, oldErr := secretData(ctx, ns, key.Name+"-ca")
		got, err := getTC(ctx, key)
		if err != nil {
			return false, "", err
		}
		done := slices.Equal(rec.Trusted, []int{2}) && servingNew && apierrors.IsNotFound(oldErr) &&
			hasCondition(got, v1alpha1.ConditionCARotated, metav1.ConditionTrue, v1alpha1.ReasonCAsInUse)
		return done, fmt.Sprintf("record %+v serving by new %v old Secret %v %s", *rec, servingNew, oldErr, conditionsString(got)), nil
	})
	if oldCert.Equal(newCert) {
		t.Error("the new cluster CA is the old one")
	}
	// kubefarm's own tenant client (the internal admin kubeconfig) trusts
	// the new CA alone again.
	poll(ctx, t, "the internal admin kubeconfig trusts the new CA alone", time.Minute, func(ctx context.Context) (bool, string, error) {
		d, err := secretData(ctx, ns, tenantcluster.InternalAdminKubeconfigSecretName(key.Name))
		if err != nil {
			return false, "", err
		}
		kc, err := clientcmd.Load(d[tenantcluster.AdminKubeconfigKey])
		if err != nil {
			return false, "", err
		}
		for _, cl := range kc.Clusters {
			certs := pemCerts(t, cl.CertificateAuthorityData)
			return len(certs) == 1 && certs[0].Equal(newCert), fmt.Sprintf("%d CA certificates", len(certs)), nil
		}
		return false, "no cluster", nil
	})
}
