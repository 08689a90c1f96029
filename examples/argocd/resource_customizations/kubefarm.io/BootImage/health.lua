-- ArgoCD health of a kubefarm.io BootImage: whether kubefarm-pxe fetched
-- its kernel, initrd and rootfs and each matches its digest (Ready mirrors
-- ArtifactsVerified). Runs without Lua's open libraries (argocd-cm's
-- default). See examples/argocd/README.md for the verdicts.
local hs = {}

local ready = nil
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end

local generation = obj.metadata.generation or 0
if ready == nil then
  hs.status = "Progressing"
  hs.message = "waiting for kubefarm-pxe to fetch and verify the artifacts"
  return hs
end
if (ready.observedGeneration or generation) < generation then
  hs.status = "Progressing"
  hs.message = "waiting for kubefarm-pxe to verify generation " .. tostring(generation)
  return hs
end

local m = ready.reason or ""
if ready.message ~= nil and ready.message ~= "" then
  m = m .. ": " .. ready.message
end
hs.message = m
if ready.status == "True" then
  hs.status = "Healthy"
elseif ready.reason == "ArtifactAddressRefused" or ready.reason == "DigestMismatch" or ready.reason == "ArtifactFetchFailed" then
  -- ArtifactAddressRefused: a source is at an address kubefarm-pxe never
  -- fetches from (loopback, cloud metadata, the admin cluster's ranges).
  -- DigestMismatch: the content is not what the immutable spec names, and
  -- is never served. ArtifactFetchFailed is retried with backoff, like an
  -- image pull, which ArgoCD calls Degraded for a Pod (ImagePullBackOff).
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
return hs
