-- ArgoCD health of a kubefarm.io DHCPLease: an address of a NodePool's
-- dynamic range that kubefarm-pxe leased to a MAC of no Machine. It has no
-- status; the spec is the lease. Runs without Lua's open libraries
-- (argocd-cm's default). See examples/argocd/README.md for the verdicts.
local hs = {}
local spec = obj.spec or {}
local ip = spec.ip or "?"
local mac = spec.mac or "?"
local expires = spec.expireTime or "?"

-- A declined address is used by a host the pool does not know: it stays
-- out of the range until expireTime and is then offered again, to meet the
-- same squatter unless someone finds it.
if spec.declined == true then
  hs.status = "Degraded"
  hs.message = mac .. " declined " .. ip .. ": another host on the network uses it; the address is withheld until " .. expires
  return hs
end
hs.status = "Healthy"
hs.message = ip .. " leased to " .. mac .. " until " .. expires
return hs
