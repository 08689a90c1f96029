-- ArgoCD health of a kubefarm.io DiscoveredMachine: a machine no Machine
-- claims that booted in discovery mode and reported its hardware
-- (docs/discovery.md). It has no status; the report is the object, and it
-- waits for `kubectl kubefarm enroll`. Cluster-scoped and made by
-- kubefarm-pxe, so no application manages it. Runs without Lua's open
-- libraries (argocd-cm's default). See examples/argocd/README.md.
local hs = {}
local spec = obj.spec or {}
local hw = spec.hardware or {}
local sys = hw.system or {}
hs.status = "Healthy"
hs.message = (spec.mac or "?") .. " at " .. (spec.ip or "?") .. " in " .. (spec.pool or "?") ..
  ": " .. (sys.vendor or "?") .. " " .. (sys.product or "?") .. ", waiting to be enrolled"
return hs
