-- ArgoCD health of a kubefarm.io NodePool: its machines (Ready) and its
-- rolling reboot-to-update (Progressing, Paused, Halted, Complete; see
-- docs/rollout.md). Runs without Lua's open libraries (argocd-cm's
-- default), so it uses no string or math functions. See
-- examples/argocd/README.md for the verdicts.
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

local generation = obj.metadata.generation or 0
local function stale()
  hs.status = "Progressing"
  hs.message = "waiting for kubefarm-manager to observe generation " .. tostring(generation)
  return hs
end

-- The NodePool controller writes status.observedGeneration, Ready and
-- MachinesReady; the rollout controller writes Progressing, Paused, Halted
-- and Complete. Each condition carries the generation it was decided for,
-- and the two controllers catch up separately: a Complete=True left from
-- before a bootImage change must not read as a finished rollout.
if obj.status == nil or (obj.status.observedGeneration or 0) < generation then
  return stale()
end
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if (c.observedGeneration or generation) < generation then
      return stale()
    end
  end
end
local ready = condition("Ready")
local progressing = condition("Progressing")
local paused = condition("Paused")
local halted = condition("Halted")
local complete = condition("Complete")

-- Hard failures: they last until an operator acts.
-- InvalidSpec: nothing is written until the spec is edited.
if ready ~= nil and ready.status == "False" and (ready.reason == "InvalidSpec" or ready.reason == "MachineConflict") then
  hs.status = "Degraded"
  hs.message = why(ready)
  return hs
end
-- Halted: failed updates exceeded spec.rollout.failureBudget; nothing
-- starts until the pool is annotated with kubefarm.io/rollout-retry.
if halted ~= nil and halted.status == "True" then
  hs.status = "Degraded"
  hs.message = why(halted)
  return hs
end
if progressing ~= nil and progressing.reason == "InvalidStrategy" then
  hs.status = "Degraded"
  hs.message = why(progressing)
  return hs
end

if progressing == nil or complete == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the rollout controller's conditions"
  return hs
end

-- Updates in flight finish even when the pool is paused.
if progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = why(progressing)
  return hs
end

-- Machines wait, and only an operator (resuming) or the clock (a
-- maintenance window opening) starts them: nothing is in motion, so
-- Suspended, as ArgoCD shows a paused Deployment or Rollout.
local isPaused = (obj.spec ~= nil and obj.spec.rollout ~= nil and obj.spec.rollout.paused == true)
  or (paused ~= nil and paused.status == "True")
if complete.status ~= "True" and (isPaused or progressing.reason == "RolloutPaused") then
  hs.status = "Suspended"
  if progressing.reason == "RolloutPaused" then
    hs.message = why(progressing)
  elseif paused ~= nil and paused.status == "True" then
    hs.message = why(paused)
  else
    hs.message = "spec.rollout.paused holds new updates back; " .. why(complete)
  end
  return hs
end
-- Held by the rollout's gates (blocking pods, kubefarm.io/reboot-hold):
-- a job's end or a person releases them, as with a window.
if complete.status ~= "True" and (progressing.reason == "WaitingForWindow" or progressing.reason == "RolloutHeld") then
  hs.status = "Suspended"
  hs.message = why(progressing)
  return hs
end

-- WaitingForBudget, BootImageNotFound, BootImageNotReady, or machines that
-- have not booted the pool's image yet: the rollout moves on by itself.
if complete.status ~= "True" then
  hs.status = "Progressing"
  if progressing.reason == "RolloutComplete" then
    hs.message = why(complete)
  else
    hs.message = why(progressing)
  end
  return hs
end

if ready == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the Ready condition"
  return hs
end
-- An empty pool is what its spec asks for: Healthy, as a Deployment
-- scaled to zero is.
if ready.status == "True" or ready.reason == "NoMachines" then
  hs.status = "Healthy"
  hs.message = why(ready)
  return hs
end
-- MachinesNotReady (nodes joining or down), BootImageNotFound (it may be
-- created later in the same sync), ReconcileError (retried).
hs.status = "Progressing"
hs.message = why(ready)
return hs
