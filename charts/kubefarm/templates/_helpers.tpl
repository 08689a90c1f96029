{{/*
The TenantCluster's name: clusterName, or the release name.
*/}}
{{- define "kubefarm.cluster" -}}
{{- .Values.clusterName | default .Release.Name -}}
{{- end -}}

{{/*
Labels of every object. No chart version or revision: a label that changes
with every upgrade would make ArgoCD and server-side apply see a change in
objects whose content did not change.
*/}}
{{- define "kubefarm.labels" -}}
app.kubernetes.io/name: kubefarm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
kubefarm.io/cluster: {{ include "kubefarm.cluster" . }}
{{- end -}}

{{/*
kubefarm.ipv4: fails unless .ip (at .where) is a dotted IPv4 address.
*/}}
{{- define "kubefarm.ipv4" -}}
{{- $ok := regexMatch "^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$" (toString .ip) -}}
{{- if not $ok -}}
{{- fail (printf "%s: %q is not an IPv4 address" .where (toString .ip)) -}}
{{- end -}}
{{- end -}}

{{/*
kubefarm.prefixLen: the prefix length of the dotted netmask .mask (at
.where); fails on anything but a contiguous IPv4 netmask.
*/}}
{{- define "kubefarm.prefixLen" -}}
{{- $bits := dict "255" 8 "254" 7 "252" 6 "248" 5 "240" 4 "224" 3 "192" 2 "128" 1 "0" 0 -}}
{{- $octets := splitList "." (toString .mask) -}}
{{- $bad := printf "%s: netmask %q is not a netmask such as 255.255.0.0" .where (toString .mask) -}}
{{- if ne (len $octets) 4 }}{{ fail $bad }}{{ end -}}
{{- $len := 0 -}}
{{- $full := true -}}
{{- range $o := $octets -}}
{{- if not (hasKey $bits $o) }}{{ fail $bad }}{{ end -}}
{{- $b := int (get $bits $o) -}}
{{- if and (not $full) (ne $b 0) }}{{ fail $bad }}{{ end -}}
{{- if ne $b 8 }}{{ $full = false }}{{ end -}}
{{- $len = add $len $b -}}
{{- end -}}
{{- $len -}}
{{- end -}}

{{/*
kubefarm.subnet: the CIDR of the network .ip belongs to under .mask, e.g.
10.28.36.1 and 255.255.0.0 give 10.28.0.0/16.
*/}}
{{- define "kubefarm.subnet" -}}
{{- include "kubefarm.ipv4" . -}}
{{- $len := include "kubefarm.prefixLen" . -}}
{{- $ip := splitList "." (toString .ip) -}}
{{- $net := list -}}
{{- range $i, $m := splitList "." (toString .mask) -}}
{{- $block := sub 256 (atoi $m) -}}
{{- $net = append $net (mul (div (atoi (index $ip $i)) $block) $block) -}}
{{- end -}}
{{- printf "%s/%s" (join "." $net) $len -}}
{{- end -}}

{{/*
kubefarm.lease: a dnsmasq lease time (45m, 12h, 1d, 1w, seconds, infinite)
as a Go duration; "" for infinite, which keeps the NodePool's default (the
machines' addresses are static either way: only the renewal period differs).
*/}}
{{- define "kubefarm.lease" -}}
{{- $l := toString .lease -}}
{{- if or (eq $l "infinite") (eq $l "") -}}
{{- else if regexMatch "^[0-9]+[smh]$" $l -}}{{ $l }}
{{- else if regexMatch "^[0-9]+d$" $l -}}{{ mul (atoi (trimSuffix "d" $l)) 24 }}h
{{- else if regexMatch "^[0-9]+w$" $l -}}{{ mul (atoi (trimSuffix "w" $l)) 168 }}h
{{- else if regexMatch "^[0-9]+$" $l -}}{{ $l }}s
{{- else -}}
{{- fail (printf "%s: lease time %q is not one dnsmasq accepts (45m, 12h, 1d, infinite)" .where $l) -}}
{{- end -}}
{{- end -}}

{{/*
kubefarm.range: a kubefarm nodePools[].range (dnsmasq's dhcp-range) as the
YAML of a NodePool network: subnet, leaseTime and, for a start,end range,
dynamicRange. Forms:
  <ip>,static,<netmask>[,<broadcast>][,<lease>]
  <start>,<end>,<netmask>[,<broadcast>][,<lease>]
dnsmasq's set:/tag: prefixes and modes other than static are refused: pools
are told apart by subnet and MAC, and kubefarm-pxe has no proxy mode.
*/}}
{{- define "kubefarm.range" -}}
{{- $where := .where -}}
{{- $parts := list -}}
{{- range $p := splitList "," (toString .range) }}{{ $parts = append $parts (trim $p) }}{{ end -}}
{{- range $p := $parts -}}
{{- if or (hasPrefix "set:" $p) (hasPrefix "tag:" $p) -}}
{{- fail (printf "%s: %q: dnsmasq tags have no meaning in kubefarm (kubefarm-pxe tells pools apart by subnet and MAC); remove it" $where $p) -}}
{{- end -}}
{{- end -}}
{{- $isIP := "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$" -}}
{{- $out := dict -}}
{{- $rest := list -}}
{{- if lt (len $parts) 2 -}}
{{- fail (printf "%s: %q is not a dhcp-range: give <ip>,static,<netmask> or <start>,<end>,<netmask>" $where (toString .range)) -}}
{{- end -}}
{{- $first := index $parts 0 -}}
{{- include "kubefarm.ipv4" (dict "ip" $first "where" $where) -}}
{{- $second := index $parts 1 -}}
{{- if eq $second "static" -}}
{{- $rest = slice $parts 2 -}}
{{- else if regexMatch $isIP $second -}}
{{- include "kubefarm.ipv4" (dict "ip" $second "where" $where) -}}
{{- $_ := set $out "dynamicRange" (dict "start" $first "end" $second) -}}
{{- $rest = slice $parts 2 -}}
{{- else -}}
{{- fail (printf "%s: %q: mode %q has no meaning in kubefarm (no proxy DHCP); give <ip>,static,<netmask> or <start>,<end>,<netmask>" $where (toString .range) $second) -}}
{{- end -}}
{{- if or (eq (len $rest) 0) (not (regexMatch $isIP (index $rest 0))) -}}
{{- fail (printf "%s: %q has no netmask; kubefarm needs it to know the subnet, e.g. %s,static,255.255.255.0" $where (toString .range) $first) -}}
{{- end -}}
{{- $_ := set $out "subnet" (include "kubefarm.subnet" (dict "ip" $first "mask" (index $rest 0) "where" $where)) -}}
{{- $rest = slice $rest 1 -}}
{{- if and (gt (len $rest) 0) (regexMatch $isIP (index $rest 0)) -}}
{{- $rest = slice $rest 1 -}}{{/* the broadcast address: kubefarm-pxe derives it from the subnet */}}
{{- end -}}
{{- if gt (len $rest) 1 -}}
{{- fail (printf "%s: %q has more fields than <ip>,static|<end>,<netmask>,<broadcast>,<lease>" $where (toString .range)) -}}
{{- end -}}
{{- if eq (len $rest) 1 -}}
{{- $lease := include "kubefarm.lease" (dict "lease" (index $rest 0) "where" $where) -}}
{{- if $lease }}{{ $_ := set $out "leaseTime" $lease }}{{ end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
kubefarm.hexIPs: a comma-separated list of IPv4 addresses as the 0x-hex
payload of a DHCP option.
*/}}
{{- define "kubefarm.hexIPs" -}}
{{- $where := .where -}}
{{- $hex := "0x" -}}
{{- range $a := splitList "," (toString .value) -}}
{{- $a = trim $a -}}
{{- include "kubefarm.ipv4" (dict "ip" $a "where" $where) -}}
{{- range $o := splitList "." $a }}{{ $hex = printf "%s%02x" $hex (atoi $o) }}{{ end -}}
{{- end -}}
{{- $hex -}}
{{- end -}}

{{/*
kubefarm.dhcpOptions: one tag's tags.dhcpOptions entries (.opts, of tag
.tag) as the YAML of a NodePool tag's dhcpOptions list, sorted by code.
router, dns-server and domain-name of `all` are the pools' network (see
kubefarm.network) and skipped here; anywhere else they are refused, since
kubefarm-pxe sets options 3, 6 and 15 from the pool's network.
*/}}
{{- define "kubefarm.dhcpOptions" -}}
{{- $tag := .tag -}}
{{- $network := list "router" "dns-server" "domain-name" -}}
{{- $ipOptions := dict "ntp-server" 42 "broadcast" 28 "netbios-ns" 44 "log-server" 7 -}}
{{- $textOptions := dict "root-path" 17 "tftp-server" 66 "bootfile-name" 67 -}}
{{- $byCode := dict -}}
{{- range $name := keys .opts | sortAlpha -}}
{{- $value := toString (get $.opts $name) -}}
{{- $where := printf "tags.dhcpOptions.%s.%s" $tag $name -}}
{{- $key := trimPrefix "option:" $name -}}
{{- if has $key $network -}}
{{- if ne $tag "all" -}}
{{- fail (printf "%s: kubefarm-pxe sets the router, DNS servers and domain from the pool's network; set them in tags.dhcpOptions.all or in nodePools[].network" $where) -}}
{{- end -}}
{{- else if hasKey $ipOptions $key -}}
{{- $_ := set $byCode (printf "%03d" (int (get $ipOptions $key))) (dict "code" (int (get $ipOptions $key)) "value" (include "kubefarm.hexIPs" (dict "value" $value "where" $where))) -}}
{{- else if hasKey $textOptions $key -}}
{{- fail (printf "%s: kubefarm-pxe sets the boot server and file itself; remove it" $where) -}}
{{- else if regexMatch "^[0-9]{1,3}$" $key -}}
{{- $_ := set $byCode (printf "%03d" (atoi $key)) (dict "code" (atoi $key) "value" $value) -}}
{{- else -}}
{{- fail (printf "%s: not a DHCP option this chart knows by name (router, dns-server, domain-name, ntp-server, broadcast, netbios-ns, log-server); give its number as the key, e.g. \"42\", with a text or 0x-hex value" $where) -}}
{{- end -}}
{{- end -}}
{{- $list := list -}}
{{- range $c := keys $byCode | sortAlpha }}{{ $list = append $list (get $byCode $c) }}{{ end -}}
{{- toYaml $list -}}
{{- end -}}
