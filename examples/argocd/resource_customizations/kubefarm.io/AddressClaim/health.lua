-- ArgoCD health of a kubefarm.io AddressClaim: the lock on one MAC or IPv4
-- address, held for one Machine (docs/addresses.md). It has no status; its
-- existence is the claim. A conflict shows on the NodePool that could not
-- claim the address (AddressesClaimed=False), not here. Runs without Lua's
-- open libraries (argocd-cm's default). See examples/argocd/README.md.
local hs = {}
local spec = obj.spec or {}
local holder = spec.holder or {}
hs.status = "Healthy"
hs.message = (spec.kind or "?") .. " " .. (spec.address or "?") .. " held for Machine " ..
  (holder.namespace or "?") .. "/" .. (holder.machine or "?") .. " of NodePool " .. (holder.pool or "?")
return hs
