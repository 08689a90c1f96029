package v1alpha1

// The label, annotation and finalizer keys kubefarm writes on objects, in
// one place: operators select on them, other tools read them, and two
// packages that meant the same key must not spell it twice. The standard
// app.kubernetes.io keys stay with the builders that set them.
const (
	// LabelTenantCluster names the TenantCluster an object belongs to: the
	// control plane's objects, the pools' Machines, and the credentials of
	// a tenant (Secrets that live in another namespace than their tenant
	// also carry LabelTenantNamespace). One selector finds everything of a
	// tenant.
	LabelTenantCluster = "kubefarm.io/tenant-cluster"
	// LabelTenantNamespace is the namespace of the TenantCluster a
	// credential Secret in kubefarm's own namespace belongs to.
	LabelTenantNamespace = "kubefarm.io/tenant-namespace"
	// LabelPool names the NodePool a Machine was built for; the pool
	// deletes the Machines whose entry is gone by it.
	LabelPool = "kubefarm.io/pool"
	// LabelMachine names the Machine a bootstrap token was issued for;
	// pruning and an operator looking for a machine's tokens select on it.
	LabelMachine = "kubefarm.io/machine"
	// LabelCredential marks the Secrets kubefarm-pxe may read: its cache
	// selects on it, so nothing else in its namespace enters its memory.
	LabelCredential = "kubefarm.io/credential"
	// LabelBMCCredentials, with the value "true", marks a Secret the
	// manager may send to a BMC as spec.power.credentialsSecret. Whoever
	// can write a NodePool chooses the BMC's address, so without this
	// opt-in by the Secret's owner a pool author could have the manager
	// send any Secret of the namespace that has "username" and "password"
	// keys to a host of their choosing.
	LabelBMCCredentials = "kubefarm.io/bmc-credentials"
	// LabelNotifyURL, with the value "true", marks a Secret whose "url" a
	// NodePool's spec.rollout.notify may post to: the Secret owner's
	// consent, as with LabelBMCCredentials.
	LabelNotifyURL = "kubefarm.io/notify-url"
	// LabelPKIRole marks certificate Secrets of one role of a tenant's PKI.
	LabelPKIRole = "kubefarm.io/pki-role"

	// AnnotationChecksum on a pod template holds the hash of the
	// certificate Secrets and configuration the pods mount; it changes
	// when cert-manager renews a certificate, which rolls the pods onto the
	// new files.
	AnnotationChecksum = "kubefarm.io/checksum"
	// AnnotationEtcdScaling on a tenant's etcd StatefulSet marks a
	// membership change under way (its value: the member count it goes
	// to), written in the same apply as the replicas a step sets, so a
	// change whose last status write was lost is still seen and finished.
	AnnotationEtcdScaling = "kubefarm.io/etcd-scaling"
	// AnnotationEncryptionWriteKey on the encryption key Secret names the
	// key new writes use.
	AnnotationEncryptionWriteKey = "kubefarm.io/encryption-write-key"
	// AnnotationEncryptionRotation on the key Secret is the stage of a
	// rotation in progress (absent: none).
	AnnotationEncryptionRotation = "kubefarm.io/encryption-rotation"
	// AnnotationEncryptionHandled on the key Secret is the value of the
	// TenantCluster's AnnotationRotateEncryptionKey the last rotation was
	// started for.
	AnnotationEncryptionHandled = "kubefarm.io/encryption-rotation-handled"
	// AnnotationEncryptionRestoredFrom on the key Secret names the snapshot
	// whose key file its keys came from (spec.etcd.restoreFrom); absent on
	// a tenant's own keys and on a Secret copied by hand.
	AnnotationEncryptionRestoredFrom = "kubefarm.io/encryption-restored-from"
	// AnnotationRotateEncryptionKey on a TenantCluster requests a key
	// rotation: a value the key Secret has not handled yet starts one (the
	// date, say). A request during a rotation waits for it to finish.
	AnnotationRotateEncryptionKey = "kubefarm.io/rotate-encryption-key"
	// AnnotationRotateCAPrefix + a CA's role ("front-proxy-ca") on a
	// TenantCluster requests the rotation of that CA: a value its trust
	// Secret has not handled yet starts one (the date, say); a request
	// during a rotation waits for it to finish (docs/pki.md).
	AnnotationRotateCAPrefix = "kubefarm.io/rotate-"
	// The record of a CA's rotation, on its trust Secret
	// (<tenant>-<ca>-trust): the generations whose certificates the
	// Secret's bundle holds ("1,2"), the generation that signs the leaves,
	// the generation being issued and not yet trusted ("" when none), and
	// the request the last rotation was started for.
	AnnotationCATrusted = "kubefarm.io/ca-trusted"
	AnnotationCASigner  = "kubefarm.io/ca-signer"
	AnnotationCAPending = "kubefarm.io/ca-pending"
	AnnotationCAHandled = "kubefarm.io/ca-rotation-handled"
	// The cluster CA's record has two more: the generation that signs the
	// leaves the tenant's nodes verify (the API server's and the
	// Konnectivity server's serving certificates and the API server's
	// kubelet client certificate), "" when it is the signer; and the time
	// from which a node's boot counts as booted with the new signer (its
	// kubelet's certificates signed by it and both generations trusted),
	// "" until the rotation waits for the nodes' reboots.
	AnnotationCAServing    = "kubefarm.io/ca-serving"
	AnnotationCANodesSince = "kubefarm.io/ca-nodes-rebooted-since"
	// LabelCAGeneration on a CA's Certificate and Secret is its
	// generation; the first has none (it predates rotation) and counts as 1.
	LabelCAGeneration = "kubefarm.io/ca-generation"
	// AnnotationRolloutRetry on a NodePool restarts a halted rollout: when
	// its value differs from status.observedRetry, failed machines are
	// tried again and the failure count starts from zero. `kubectl
	// kubefarm rollout retry` sets it to the current time.
	AnnotationRolloutRetry = "kubefarm.io/rollout-retry"
	// AnnotationRebootHold keeps a machine out of the rollout's reboots (an
	// image change or a reboot for drift) while it is set, on the Machine
	// (the operator's) or on its tenant Node (the tenant's, as kured users
	// keep chosen nodes out of reboots). Its value is the reason, shown in
	// the Machine's RolloutHeld condition; an update already started is not
	// held. Removing the annotation releases the machine.
	AnnotationRebootHold = "kubefarm.io/reboot-hold"

	// AnnotationPowerRequest on a Machine asks kubefarm-manager for one
	// power operation: "<on|off|cycle>[,netboot]@<RFC3339 time>" (netboot:
	// a one-time network boot first; not with off). The machinepower
	// controller performs a request once, when its time is after
	// status.power.lastOperationTime, and records it there and in
	// status.power.lastOperation. `kubectl kubefarm power` sets it.
	AnnotationPowerRequest = "kubefarm.io/power-request"

	// TaintNetworkUnavailable keeps pods off a node until its pod network
	// is verified (NoSchedule, put on at registration and lifted by the
	// manager once the agent reports the CNI chain working).
	TaintNetworkUnavailable = "kubefarm.io/network-unavailable"

	// FinalizerTenantCluster holds a TenantCluster until its controller
	// has handled what garbage collection cannot: the token issuer
	// credential in another namespace, and etcd's volumes and the PKI per
	// spec.volumeReclaimPolicy.
	FinalizerTenantCluster = "kubefarm.io/tenantcluster"
	// FinalizerMachineRemoval holds a Machine until its node has left the
	// tenant: cordoned, drained with the rollout's drain (budgets
	// honoured), its Node deleted, and the machine powered off where a
	// BMC driver is set. A machine that never joined goes at once.
	FinalizerMachineRemoval = "kubefarm.io/machine-removal"

	// LabelCatchAll marks a Machine the NodePool controller made for an
	// unknown MAC that booted in a catch-all range with unknownMachines:
	// Join. It has no entry in spec.machines, so the pool keeps it (its
	// name and address persist across reboots and rollouts) until an
	// operator deletes it.
	LabelCatchAll = "kubefarm.io/catch-all"
)
