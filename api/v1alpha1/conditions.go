package v1alpha1

// Condition types shared by the kinds of this API. Progress is always reported
// as metav1.Conditions, never as a phase enum, so that several independent
// facts (etcd healthy, certificates issued) can be true or false at once.
const (
	// ConditionReady summarises the object: true when everything it manages works.
	ConditionReady = "Ready"

	// TenantCluster conditions.
	ConditionEtcdReady         = "EtcdReady"
	ConditionAPIServerReady    = "APIServerReady"
	ConditionCertificatesReady = "CertificatesReady"
	ConditionAddonsReady       = "AddonsReady"

	// NodePool conditions.
	ConditionMachinesReady  = "MachinesReady"
	ConditionRolloutHealthy = "RolloutHealthy"

	// Machine conditions.
	ConditionBooted    = "Booted"
	ConditionUpToDate  = "UpToDate"
	ConditionNodeReady = "NodeReady"
	// ConditionNetworkVerified is what kubefarm-agent found of the node's
	// CNI chain in the boot of status.lastBoot (written in the same status
	// write, so it always refers to that boot). Only when it is True may
	// the manager lift kubefarm.io/network-unavailable from the node.
	ConditionNetworkVerified = "NetworkVerified"

	// BootImage conditions.
	ConditionArtifactsVerified = "ArtifactsVerified"
)
