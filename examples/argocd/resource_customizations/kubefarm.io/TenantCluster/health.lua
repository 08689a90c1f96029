-- ArgoCD health of a kubefarm.io TenantCluster (a tenant control plane).
-- Runs without Lua's open libraries (argocd-cm's default), so it uses no
-- string or math functions. See examples/argocd/README.md for the verdicts.
local hs = {}

local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function why(c)
  local m = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    m = m .. ": " .. c.message
  end
  return m
end

-- A status written for an older spec says nothing about the current one.
local generation = obj.metadata.generation or 0
if obj.status == nil or (obj.status.observedGeneration or 0) < generation then
  hs.status = "Progressing"
  hs.message = "waiting for kubefarm-manager to observe generation " .. tostring(generation)
  return hs
end

local ready = condition("Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the Ready condition"
  return hs
end
if (ready.observedGeneration or generation) < generation then
  hs.status = "Progressing"
  hs.message = "waiting for kubefarm-manager to observe generation " .. tostring(generation)
  return hs
end
-- spec.version's rollout: a step the controller refused (a kubelet too
-- old for it, a version it cannot reach) waits for a person, although the
-- control plane keeps serving: Degraded. A step under way: Progressing.
local rolled = condition("VersionRolledOut")
if rolled ~= nil and rolled.status == "False" and (rolled.observedGeneration or generation) >= generation then
  local r = rolled.reason
  if r == "KubeletSkew" or r == "KubeletVersionUnparsable" or r == "DowngradeRefused" or r == "VersionUnsupported" then
    hs.status = "Degraded"
    hs.message = why(rolled)
    return hs
  end
  if ready.status == "True" then
    hs.status = "Progressing"
    hs.message = why(rolled)
    return hs
  end
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = why(ready)
  return hs
end
-- Only an invalid spec is a hard failure: nothing is written until the
-- spec is edited. Every other reason (ReconcileError, <Condition>False,
-- NotAvailable) is retried by the controller or waits for a component.
if ready.reason == "InvalidSpec" then
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
hs.message = why(ready)
return hs
