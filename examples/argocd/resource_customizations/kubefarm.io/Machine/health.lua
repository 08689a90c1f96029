-- ArgoCD health of a kubefarm.io Machine (one netbooted server of a
-- NodePool; the NodePool controller creates it). Runs without Lua's open
-- libraries (argocd-cm's default). See examples/argocd/README.md for the
-- verdicts.
--
-- The API lists a Ready condition for Machines, but no controller writes it
-- yet: the Machine's node is judged by NodeReady (the tenant Node's Ready,
-- written by kubefarm-manager) unless a Ready condition is present.
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

local status = obj.status or {}
local generation = obj.metadata.generation or 0

-- The machine's update, written before each side effect. A Failed record
-- stays (the node cordoned) until an operator retries the pool.
local ro = status.rollout
if ro ~= nil and ro.phase ~= nil then
  local target = ""
  if ro.targetImage ~= nil and ro.targetImage.name ~= nil then
    target = " to " .. ro.targetImage.name
  end
  local detail = ""
  if ro.message ~= nil and ro.message ~= "" then
    detail = ": " .. ro.message
  end
  if ro.phase == "Failed" then
    hs.status = "Degraded"
    hs.message = "update" .. target .. " failed" .. detail
    return hs
  end
  if ro.phase ~= "Done" and ro.phase ~= "Skipped" then
    hs.status = "Progressing"
    hs.message = "update" .. target .. ": " .. ro.phase .. detail
    return hs
  end
end

-- The CNI chain of the running boot does not match what the image's
-- manifest records: the node keeps its network-unavailable taint, and
-- only another boot (usually another image) changes that.
local network = condition("NetworkVerified")
if network ~= nil and network.status == "False" then
  hs.status = "Degraded"
  hs.message = why(network)
  return hs
end

if status.lastBoot == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the machine to boot and report"
  return hs
end

local ready = condition("Ready")
if ready == nil then
  ready = condition("NodeReady")
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the node to join the tenant cluster"
  return hs
end
if (ready.observedGeneration or generation) < generation then
  hs.status = "Progressing"
  hs.message = "waiting for kubefarm-manager to observe generation " .. tostring(generation)
  return hs
end
hs.message = why(ready)
if ready.status == "True" then
  hs.status = "Healthy"
else
  -- NodeNotFound (not joined yet), NodeNotReady or NodeStatusUnknown (a
  -- kubelet starting, or one that stopped posting): ArgoCD keeps no
  -- clock, and a booting node passes through each of these.
  hs.status = "Progressing"
end
return hs
