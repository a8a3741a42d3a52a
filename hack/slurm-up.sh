#!/usr/bin/env bash
# Start a real SLURM 22.05 cluster (Debian's slurm-wlm) on this one machine,
# for berth's SLURM backend tests and examples/slurm-bridge:
#   munged, slurmctld, and one slurmd per virtual node (multiple-slurmd mode,
#   each node on its own loopback port), fake GPUs as GRES backed by
#   character devices under the state dir, a topology/tree of racks.
#
# Partitions (see docs/backends/slurm.md):
#   gpu        SLURM's own (default): berth leaves its jobs alone.
#   berth      managed by berth. State=DOWN: jobs queue but SLURM never
#   berth-hi   starts them; berth moves a job to berth-run with its node list
#              (berth-hi: the partition berth gives a higher priority).
#   berth-run  where berth's bound jobs run (hidden, UP).
#
# Idempotent: a previous instance is stopped first (hack/slurm-down.sh), the
# state dir is recreated. Installs the packages it needs with apt-get. Must
# run as root. Writes $BERTH_SLURM_DIR/env (source it: SLURM_CONF).
#
# Test marker: a random token in $BERTH_SLURM_DIR/berth-test-cluster, also
# the cluster's name (ClusterName=berth-<token>, which `scontrol show
# config` reads back from the running slurmctld). Tests that cancel jobs or
# drain nodes check both and refuse any other cluster (a user's, or one on
# the same ports that this script did not start).
#
# GPU models: every node carries its GRES type as a feature too (as sites
# do, so that --constraint="a100|h100" is accepted). All racks have
# BERTH_SLURM_GPU_TYPE; BERTH_SLURM_RACK_GPU_TYPES="h100 a100" gives rack r
# the r-th type of the list, cycled (rack1 h100, rack2 a100, rack3 h100...):
# for the GPU-model tests; the other tests need the default layout.
#
# Power saving (node autoscaling, docs/backends/slurm.md "Node autoscaling
# (power saving)"): BERTH_SLURM_CLOUD_NODES=N (default 0: off, the cluster
# exactly as without it) makes the last N nodes State=CLOUD: they start
# powered down (IDLE+CLOUD+POWERED_DOWN, no slurmd), and SLURM's power
# saving runs the ResumeProgram / SuspendProgram this script writes into
# $BERTH_SLURM_DIR/power/ (resume.sh starts the node's slurmd, suspend.sh
# stops it) when a node is powered up or down (scontrol update
# NodeName=... State=POWER_UP / POWER_DOWN, or a job SLURM itself
# allocates there). The other nodes are SuspendExcNodes: never suspended.
# A node named in $BERTH_SLURM_DIR/power/fail-resume (one per line) is not
# started by resume.sh: its resume times out (ResumeTimeout) and SLURM marks
# it DOWN, for the tests of a failed provisioning. Timings, short for tests:
# BERTH_SLURM_SUSPEND_TIME (60 s idle before SLURM powers a node down by
# itself), BERTH_SLURM_RESUME_TIMEOUT (10 s), BERTH_SLURM_SUSPEND_TIMEOUT (3 s).
#
# Job ends: slurmctld appends a line per job as it ends (the job still
# COMPLETING) to $BERTH_SLURM_DIR/log/jobcomp.txt (JobCompType=jobcomp/filetxt,
# written in slurmctld's own process: no cost measured). berth's backend
# takes the file's growth as a cue to poll at once (slurm.Config.EndLog);
# BenchmarkEndToEnd500 counts ends from it.
#
# Settings: BERTH_SLURM_DIR (/tmp/berth-slurm), BERTH_SLURM_NODES (16),
# BERTH_SLURM_GPUS (8 per node), BERTH_SLURM_GPU_TYPE (h100),
# BERTH_SLURM_RACK_GPU_TYPES (unset: every rack BERTH_SLURM_GPU_TYPE),
# BERTH_SLURM_PER_RACK (4), BERTH_SLURM_CTLD_PORT (6817),
# BERTH_SLURM_SLURMD_PORT (6900: node i listens on port+i), BERTH_SLURM_WAIT_S (120).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${BERTH_SLURM_DIR:-/tmp/berth-slurm}"
nodes="${BERTH_SLURM_NODES:-16}"
gpus="${BERTH_SLURM_GPUS:-8}"
gtype="${BERTH_SLURM_GPU_TYPE:-h100}"
perrack="${BERTH_SLURM_PER_RACK:-4}"
ctldport="${BERTH_SLURM_CTLD_PORT:-6817}"
dport="${BERTH_SLURM_SLURMD_PORT:-6900}"
wait_s="${BERTH_SLURM_WAIT_S:-120}"
cloud="${BERTH_SLURM_CLOUD_NODES:-0}"
suspend_time="${BERTH_SLURM_SUSPEND_TIME:-60}"
resume_timeout="${BERTH_SLURM_RESUME_TIMEOUT:-10}"
suspend_timeout="${BERTH_SLURM_SUSPEND_TIMEOUT:-3}"
read -r -a rtypes <<< "${BERTH_SLURM_RACK_GPU_TYPES:-$gtype}"
cpus=64
mem=512000

say() { printf '[slurm-up] %s\n' "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "run as root (slurmctld runs as SlurmUser=root here)"
[[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 99 ] || fail "BERTH_SLURM_NODES must be 1..99"
[[ "$gpus" =~ ^[0-9]+$ ]] && [ "$gpus" -ge 1 ] || fail "BERTH_SLURM_GPUS must be >= 1"
[[ "$perrack" =~ ^[0-9]+$ ]] && [ "$perrack" -ge 1 ] || fail "BERTH_SLURM_PER_RACK must be >= 1"
[[ "$cloud" =~ ^[0-9]+$ ]] && [ "$cloud" -le "$nodes" ] || fail "BERTH_SLURM_CLOUD_NODES must be 0..BERTH_SLURM_NODES"
for v in "$suspend_time" "$resume_timeout" "$suspend_timeout"; do
  [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || fail "BERTH_SLURM_SUSPEND_TIME, _RESUME_TIMEOUT, _SUSPEND_TIMEOUT must be whole seconds >= 1"
done
[[ "$gtype" =~ ^[a-z0-9]+$ ]] || fail "BERTH_SLURM_GPU_TYPE must be lowercase letters and digits"
[ "${#rtypes[@]}" -ge 1 ] || fail "BERTH_SLURM_RACK_GPU_TYPES is empty"
for t in "${rtypes[@]}"; do
  [[ "$t" =~ ^[a-z0-9]+$ ]] || fail "BERTH_SLURM_RACK_GPU_TYPES: $t: want lowercase letters and digits"
done
# The GPU type of node i (1-based): its rack's.
ntype() { printf '%s' "${rtypes[$(( ($1 - 1) / perrack % ${#rtypes[@]} ))]}"; }
t0=$(date +%s.%N)

# 1. Packages (only when one is missing). A temporary policy-rc.d keeps the
#    packages' init scripts from starting system daemons.
pkgs="slurmctld slurmd slurm-client munge"
missing=0
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing=1
done
if [ "$missing" = 1 ]; then
  say "installing $pkgs"
  policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; policy=1
  fi
  rc=0
  # shellcheck disable=SC2086
  { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs >/dev/null; } || rc=$?
  [ "$policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || fail "apt-get install failed (rc=$rc)"
fi

# 2. Stop an earlier instance; from here a failure stops what was started.
BERTH_SLURM_DIR="$dir" bash "$here/slurm-down.sh" || true
trap 'rc=$?; [ $rc = 0 ] || { say "failed; stopping what was started"; BERTH_SLURM_DIR="$dir" bash "$here/slurm-down.sh" || true; }' EXIT
rm -rf "$dir"
mkdir -p "$dir"/{etc,spool/ctld,log,run,dev,munge}
chmod 755 "$dir" "$dir/munge" "$dir/run" "$dir/log" "$dir/etc"

# 2b. The test marker (see the header).
token="$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
[[ "$token" =~ ^[0-9a-f]{12}$ ]] || fail "could not make a marker token"
printf '%s\n' "$token" > "$dir/berth-test-cluster"

name() { printf 'node%02d' "$1"; }
all="node[01-$(printf '%02d' "$nodes")]"; [ "$nodes" = 1 ] && all=node01
host="$(hostname -s)"
# Power saving: nodes 1..nfixed are always on, the rest State=CLOUD.
nfixed=$((nodes - cloud))
fixed=""
if [ "$nfixed" -ge 1 ]; then
  fixed="node[01-$(printf '%02d' "$nfixed")]"; [ "$nfixed" = 1 ] && fixed=node01
fi
nstate() { if [ "$1" -gt "$nfixed" ]; then printf CLOUD; else printf UNKNOWN; fi; }
conf="$dir/etc/slurm.conf"
sock="$dir/munge/munged.sock"

# 3. Munge key of its own (not /etc/munge).
mungekey -c -f -k "$dir/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge/munge.key"

# 4. Fake GPU devices: clones of /dev/null (1:3), which slurmd accepts.
for ((g = 0; g < gpus; g++)); do mknod "$dir/dev/nvidia$g" c 1 3 2>/dev/null || : > "$dir/dev/nvidia$g"; done

# 5. Configuration.
{
  cat <<CONF
# written by berth's hack/slurm-up.sh: $nodes fake nodes on $host
ClusterName=berth-$token
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctldport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MinJobAge=600
MaxJobCount=20000
KillWait=5
InactiveLimit=0
SlurmdTimeout=300
Waittime=0
PreemptType=preempt/none
TopologyPlugin=topology/tree
CONF
  if [ "$cloud" -gt 0 ]; then
    cat <<CONF
# power saving (BERTH_SLURM_CLOUD_NODES=$cloud): the last $cloud nodes are State=CLOUD
SuspendProgram=$dir/power/suspend.sh
ResumeProgram=$dir/power/resume.sh
SuspendTime=$suspend_time
SuspendTimeout=$suspend_timeout
ResumeTimeout=$resume_timeout
ResumeRate=0
SuspendRate=0
SlurmctldParameters=power_save_interval=1,power_save_min_interval=0
PrivateData=cloud
CONF
    [ "$cloud" -lt "$nodes" ] && echo "SuspendExcNodes=$fixed"
  fi
  for ((i = 1; i <= nodes; i++)); do
    echo "NodeName=$(name "$i") NodeHostname=$host NodeAddr=127.0.0.1 Port=$((dport + i)) CPUs=$cpus Boards=1 SocketsPerBoard=2 CoresPerSocket=$((cpus / 2)) ThreadsPerCore=1 RealMemory=$mem Gres=gpu:$(ntype "$i"):$gpus Features=$(name "$i"),rack$(((i - 1) / perrack + 1)),$(ntype "$i") State=$(nstate "$i")"
  done
  echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1"
  echo "PartitionName=berth Nodes=ALL Default=NO MaxTime=INFINITE State=DOWN PriorityTier=1"
  echo "PartitionName=berth-hi Nodes=ALL Default=NO MaxTime=INFINITE State=DOWN PriorityTier=1"
  echo "PartitionName=berth-run Nodes=ALL Default=NO MaxTime=INFINITE State=UP Hidden=YES PriorityTier=2"
} > "$conf"
files="$dir/dev/nvidia[0-$((gpus - 1))]"; [ "$gpus" = 1 ] && files="$dir/dev/nvidia0"
{
  echo "AutoDetect=off"
  for ((i = 1; i <= nodes; i++)); do
    echo "NodeName=$(name "$i") Name=gpu Type=$(ntype "$i") File=$files"
  done
} > "$dir/etc/gres.conf"
racks=()
: > "$dir/etc/topology.conf"
r=0
for ((s = 1; s <= nodes; s += perrack)); do
  e=$((s + perrack - 1)); [ "$e" -gt "$nodes" ] && e=$nodes
  r=$((r + 1))
  nl=$(name "$s"); [ "$s" != "$e" ] && nl="node[$(printf '%02d' "$s")-$(printf '%02d' "$e")]"
  echo "SwitchName=rack$r Nodes=$nl" >> "$dir/etc/topology.conf"
  racks+=("rack$r:$nl")
done
[ "$r" -gt 1 ] && echo "SwitchName=spine Switches=rack[1-$r]" >> "$dir/etc/topology.conf"
export SLURM_CONF="$conf"

# 5b. Power saving: SLURM's ResumeProgram and SuspendProgram, called by
#     slurmctld (as root) with a hostlist. resume.sh starts each node's
#     slurmd (unless the node is named in power/fail-resume), suspend.sh
#     stops it (only a pid whose command line names this state dir).
if [ "$cloud" -gt 0 ]; then
  mkdir -p "$dir/power"
  : > "$dir/power/fail-resume"
  slurmd_bin="$(command -v slurmd)"
  scontrol_bin="$(command -v scontrol)"
  perl_bin="$(command -v perl)" || fail "perl is needed by the ResumeProgram (to clear slurmctld's signal mask)"
  cat > "$dir/power/resume.sh" <<SCRIPT
#!/bin/bash
# ResumeProgram written by berth's hack/slurm-up.sh: start the slurmd of each node of \$1.
export SLURM_CONF=$conf
log=$dir/log/power.log
for n in \$($scontrol_bin show hostnames "\$1"); do
  [[ "\$n" =~ ^node[0-9]+\$ ]] || continue
  if grep -qxF -- "\$n" $dir/power/fail-resume 2>/dev/null; then
    echo "\$(date +%T.%N) resume \$n: not started (listed in power/fail-resume)" >> "\$log"
    continue
  fi
  mkdir -p "$dir/spool/\$n"
  echo "\$(date +%T.%N) resume \$n" >> "\$log"
  # -b: report a reboot now (slurmctld takes a powering-up node for up only
  # once its boot time is after the power-up request; this host never reboots).
  # slurmctld runs this script with most signals blocked (SIGTERM too), which
  # slurmd and its jobs would inherit: perl clears the mask first.
  setsid $perl_bin -MPOSIX -e 'sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die "sigprocmask: \$!"; exec @ARGV or die "exec: \$!"' -- $slurmd_bin -b -f $conf -N "\$n" < /dev/null >> "\$log" 2>&1 || echo "\$(date +%T.%N) resume \$n: slurmd failed" >> "\$log"
done
exit 0
SCRIPT
  cat > "$dir/power/suspend.sh" <<SCRIPT
#!/bin/bash
# SuspendProgram written by berth's hack/slurm-up.sh: stop the slurmd of each node of \$1.
export SLURM_CONF=$conf
log=$dir/log/power.log
ours() { [ -n "\$1" ] && tr '\\0' ' ' < "/proc/\$1/cmdline" 2>/dev/null | grep -qF -- "$dir/"; }
for n in \$($scontrol_bin show hostnames "\$1"); do
  [[ "\$n" =~ ^node[0-9]+\$ ]] || continue
  f=$dir/run/slurmd-\$n.pid
  p=\$(tr -dc '0-9' < "\$f" 2>/dev/null)
  echo "\$(date +%T.%N) suspend \$n (pid \${p:-none})" >> "\$log"
  ours "\$p" || continue
  kill -TERM "\$p" 2>/dev/null
  for ((t = 0; t < 50; t++)); do ours "\$p" || break; sleep 0.1; done
  ours "\$p" && kill -KILL "\$p" 2>/dev/null
  rm -f "\$f"
done
exit 0
SCRIPT
  chmod 755 "$dir/power/resume.sh" "$dir/power/suspend.sh"
fi

# 6. Daemons.
munged -S "$sock" --key-file="$dir/munge/munge.key" --log-file="$dir/munge/munged.log" \
  --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge/munged.seed" ||
  fail "munged: $(tail -3 "$dir/munge/munged.log")"
slurmctld -c -f "$conf" || fail "slurmctld: $(tail -5 "$dir/log/slurmctld.log")"
for ((t = 0; t < 100; t++)); do
  scontrol ping 2>/dev/null | grep -q 'is UP' && break
  sleep 0.2
done
scontrol ping 2>/dev/null | grep -q 'is UP' || fail "slurmctld does not answer: $(tail -5 "$dir/log/slurmctld.log")"
for ((i = 1; i <= nfixed; i++)); do
  mkdir -p "$dir/spool/$(name "$i")"
  slurmd -f "$conf" -N "$(name "$i")" || fail "slurmd $(name "$i"): $(tail -5 "$dir/log/slurmd-$(name "$i").log")"
done

# 7. Wait until every node is idle.
idle=0
for ((t = 0; t < wait_s * 5; t++)); do
  idle=$(sinfo -h -N -p gpu -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$idle" -ge "$nodes" ] && break
  sleep 0.2
done
[ "$idle" -ge "$nodes" ] || { sinfo -N -l >&2 || true; fail "$idle/$nodes nodes idle after ${wait_s}s (logs: $dir/log)"; }

{
  echo "export SLURM_CONF=$conf"
  echo "export BERTH_SLURM_DIR=$dir"
  echo "export BERTH_SLURM_NODES=$nodes"
  echo "export BERTH_SLURM_GPUS=$gpus"
  echo "export BERTH_SLURM_GPU_TYPE=$gtype"
  echo "export BERTH_SLURM_RACK_GPU_TYPES='${rtypes[*]}'"
  echo "export BERTH_SLURM_RACKS='${racks[*]}'"
  echo "export BERTH_SLURM_CLOUD_NODES=$cloud"
} > "$dir/env"
say "up in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s: $nodes nodes $all x gpu:${rtypes[*]}:$gpus, racks ${racks[*]}"
[ "$cloud" = 0 ] || say "power saving: the last $cloud nodes State=CLOUD, powered down (SuspendTime=$suspend_time ResumeTimeout=$resume_timeout SuspendTimeout=$suspend_timeout; scripts and fail-resume in $dir/power)"
say "use: source $dir/env"
