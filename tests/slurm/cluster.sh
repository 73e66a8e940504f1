#!/bin/bash
# A one-node Slurm cluster on this machine, for the tests, in a private
# directory: its own munged (own key and socket), slurmctld and slurmd
# (Debian's slurm-wlm and munge; tools/install-deps.sh installs them).
#   tests/slurm/cluster.sh start DIR [auto|cgroup|linuxproc]
#   tests/slurm/cluster.sh status DIR
#   tests/slurm/cluster.sh stop DIR
#   tests/slurm/cluster.sh leftovers DIR
# start: the node's CPUs are its resources (partition "cpu", the default,
# and "gpu", the same node, with its NVIDIA cards as gres/gpu where it has
# any); process tracking by cgroup where the machine allows it (auto, the
# default: cgroup v1's freezer, or v2), else by the process tree
# (proctrack/linuxproc); a probe job checks which one ran and the line
# "cluster: proctrack/..." says it. Then `. DIR/env` points sbatch, srun,
# squeue and scancel at this cluster (SLURM_CONF). Exit 77 with "SKIP: why"
# where the machine cannot run it (not root, packages missing); any other
# failure exits 1 with the daemons' log tails.
# leftovers: the processes this cluster's jobs started that still run
# (after their job ended), one "PID COMMAND" line each.
# stop: cancels the jobs, stops the daemons and munged (waits for them),
# kills what the jobs left running (their environment names this cluster;
# listed on stderr), removes the cluster's cgroups and DIR.
set -u
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
conf=$dir/etc/slurm.conf

log_tails() {
  local f
  for f in "$dir"/log/*.log "$dir"/munge-key/munged.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
  done
}
pid_of() { [ -f "$1" ] && cat "$1" 2>/dev/null; }
# Running (a zombie is not: where init does not reap, daemons end as zombies)
alive() {
  local st
  [ -n "$1" ] && st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]
}
# Pids of what this cluster's jobs started: slurmstepd gives each job's
# processes SLURM_JOB_ID and SLURM_CONF (a shell that sourced DIR/env has
# only the latter).
job_leftovers() {
  local e p
  for e in $(grep -lzxF "SLURM_CONF=$conf" /proc/[0-9]*/environ 2>/dev/null); do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" != $$ ] && grep -qz '^SLURM_JOB_ID=' "$e" 2>/dev/null && echo "$p"
  done
}
wait_gone() {  # seconds pid...: 0 once none is alive
  local t=$1 i p up; shift
  for i in $(seq $((t * 10))); do
    up=0
    for p in "$@"; do alive "$p" && up=1; done
    [ $up = 0 ] && return 0
    sleep 0.1
  done
  return 1
}

free_port() {  # a TCP port nobody listens on or uses (from a random start)
  local used=" ${1:-0} " h p
  for h in $(awk 'FNR > 1 { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    used="$used $((16#$h)) "
  done
  p=$((20000 + RANDOM % 30000))
  while [[ $used == *" $p "* ]]; do p=$((p + 1)); done
  echo "$p"
}

# cgroup support for proctrack/cgroup: prints the CgroupPlugin, or nothing
# and the reason on fd 3.
cgroup_plugin() {
  local fz
  fz=$(awk '$3 == "cgroup" && $4 ~ /(^|,)freezer(,|$)/ { print $2; exit }' /proc/mounts)
  if [ -n "$fz" ]; then
    if mkdir "$fz/kgprobe.$$" 2>/dev/null; then rmdir "$fz/kgprobe.$$"; echo cgroup/v1; return; fi
    echo "cgroup v1 freezer at $fz is not writable" >&3; return
  fi
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
    if [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then echo cgroup/v2; return; fi
    echo "cgroup v2 at /sys/fs/cgroup is not writable" >&3; return
  fi
  echo "no cgroup v1 freezer and no cgroup v2 hierarchy" >&3
}

start() {
  local mode=${1:-auto}
  case $mode in auto|cgroup|linuxproc) ;; *) echo "cluster.sh: mode $mode: auto, cgroup or linuxproc" >&2; exit 1 ;; esac
  [ "$(id -u)" = 0 ] || { echo "SKIP: the test cluster needs root (slurmd runs jobs as their users)"; exit 77; }
  local p
  for p in munged munge slurmctld slurmd sbatch srun squeue scontrol scancel sinfo; do
    command -v "$p" >/dev/null || { echo "SKIP: $p not installed (tools/install-deps.sh --slurm: slurm-wlm, munge)"; exit 77; }
  done
  [ ! -e "$dir" ] || { echo "cluster.sh: $dir exists (stop the cluster there first)" >&2; exit 1; }
  local host node cpus mem cg="" why="" proc
  host=$(hostname -s)
  # A node name of its own: Slurm names the job cgroups after it
  # (slurm_NODE/uid_U/job_J), so two test clusters never share one.
  node=kg$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  cpus=$(nproc)
  mem=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
  mkdir -p "$dir"/{etc,munge,munge-key,state,spool,log,run} || exit 1
  # munged insists: the socket's directory (and those above) searchable by
  # all, the key's private.
  chmod 755 "$dir" "$dir/munge" "$dir/etc"
  chmod 700 "$dir/munge-key"
  head -c 1024 /dev/urandom >"$dir/munge-key/munge.key"
  chmod 400 "$dir/munge-key/munge.key"
  if ! munged --key-file="$dir/munge-key/munge.key" --socket="$dir/munge/munge.sock" \
       --pid-file="$dir/munge-key/munged.pid" --log-file="$dir/munge-key/munged.log" \
       --seed-file="$dir/munge-key/munged.seed" 2>"$dir/log/munged.err"; then
    cat "$dir/log/munged.err" >&2; echo "cluster.sh: munged did not start" >&2; stop_all; exit 1
  fi

  if [ "$mode" != linuxproc ]; then
    cg=$(cgroup_plugin 3>"$dir/log/cgroup.why")
    why=$(cat "$dir/log/cgroup.why")
    [ -n "$cg" ] || [ "$mode" != cgroup ] || { echo "SKIP: proctrack/cgroup asked for, but $why"; stop_all; exit 77; }
  fi
  local gres="" gpus
  gpus=$(ls /dev 2>/dev/null | grep -cE '^nvidia[0-9]+$')
  if [ "$gpus" -gt 0 ]; then
    gres=" Gres=gpu:$gpus"
    echo "Name=gpu File=/dev/nvidia[0-$((gpus - 1))]" >"$dir/etc/gres.conf"
  fi
  write_conf() {  # proctrack
    local ctl_port d_port
    ctl_port=$(free_port); d_port=$(free_port "$ctl_port")
    cat >"$conf" <<EOF
# Written by tests/slurm/cluster.sh: a one-node test cluster.
ClusterName=kgtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/$1
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# schedule at once (a pending array task waits 3 s by default)
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
FirstJobId=$((1000 + RANDOM))
KillWait=5
MessageTimeout=20
${gres:+GresTypes=gpu}
NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem$gres State=UNKNOWN
PartitionName=cpu Nodes=$node Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$node MaxTime=INFINITE State=UP
EOF
    echo "CgroupPlugin=${cg:-autodetect}" >"$dir/etc/cgroup.conf"
  }
  launch() {  # proctrack: 0 when the node took a job
    write_conf "$1"
    export SLURM_CONF=$conf
    slurmctld >>"$dir/log/daemons.err" 2>&1 || return 1
    slurmd -N "$node" >>"$dir/log/daemons.err" 2>&1 || return 1
    local i
    for i in $(seq 150); do
      sinfo -h -n "$node" -o %t 2>/dev/null | grep -qx idle && break
      sleep 0.2
    done
    timeout 60 srun -N1 -n1 -t 1 cat /proc/self/cgroup >"$dir/log/probe.out" 2>>"$dir/log/probe.err"
  }
  proc=linuxproc
  if [ -n "$cg" ]; then
    if launch cgroup && grep -q "/slurm[^/]*/uid_0/job_[0-9]*/step_0" "$dir/log/probe.out"; then
      proc=cgroup
    else
      why="$cg did not take the probe job: $(tail -n 2 "$dir/log/probe.err" "$dir/log/slurmd.log" 2>/dev/null | tr '\n' ' ')"
      [ "$mode" = cgroup ] && { echo "cluster.sh: proctrack/cgroup: $why" >&2; log_tails; stop_all; exit 1; }
      stop_daemons
      mkdir -p "$dir/log/cgroup-try" && mv "$dir"/log/*.log "$dir"/log/*.err "$dir/log/cgroup-try/" 2>/dev/null
      rm -rf "$dir/state" "$dir/spool"; mkdir -p "$dir/state" "$dir/spool"
    fi
  fi
  if [ $proc = linuxproc ] && ! launch linuxproc; then
    echo "cluster.sh: the cluster did not run a job" >&2; log_tails; stop_all; exit 1
  fi
  echo "$proc" >"$dir/proctrack"
  [ -z "$cg" ] || echo "$cg" >"$dir/cgroup"
  echo "$node" >"$dir/node"
  printf 'export SLURM_CONF=%q\n' "$conf" >"$dir/env"
  if [ $proc = cgroup ]; then
    echo "cluster: proctrack/cgroup ($cg): node $node, $cpus CPUs${gres:+,$gres}; a job's processes are tracked by cgroup"
  else
    echo "cluster: proctrack/linuxproc: node $node, $cpus CPUs${gres:+,$gres}; a job's processes are tracked by the process tree${why:+ (no cgroup tracking: $why)}"
  fi
}

stop_daemons() {
  local ctl d
  ctl=$(pid_of "$dir/run/slurmctld.pid"); d=$(pid_of "$dir/run/slurmd.pid")
  if [ -f "$conf" ] && { alive "$ctl" || alive "$d"; }; then
    SLURM_CONF=$conf timeout 20 scontrol shutdown >/dev/null 2>&1
    wait_gone 15 $ctl $d || { kill $ctl $d 2>/dev/null; wait_gone 10 $ctl $d || kill -9 $ctl $d 2>/dev/null; }
  fi
}

stop_all() {
  local node ids p left m
  node=$(cat "$dir/node" 2>/dev/null || true)
  if [ -f "$conf" ] && alive "$(pid_of "$dir/run/slurmctld.pid")"; then
    ids=$(SLURM_CONF=$conf timeout 20 squeue -h -o %A 2>/dev/null)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$conf timeout 20 scancel $ids 2>/dev/null
      for p in $(seq 100); do
        [ -z "$(SLURM_CONF=$conf timeout 20 squeue -h -o %A 2>/dev/null)" ] && break
        sleep 0.2
      done
    fi
  fi
  stop_daemons
  # slurmstepd of jobs still finishing, then what the jobs left behind
  left=$(job_leftovers)
  if [ -n "$left" ]; then
    for p in $left; do echo "cluster.sh: stop: killing $p, left by a job: $({ tr '\0' ' ' </proc/$p/cmdline; } 2>/dev/null)" >&2; done
    # shellcheck disable=SC2086
    kill $left 2>/dev/null; wait_gone 5 $left || kill -9 $left 2>/dev/null
  fi
  p=$(pid_of "$dir/munge-key/munged.pid")
  if alive "$p"; then kill "$p"; wait_gone 10 "$p" || kill -9 "$p" 2>/dev/null; fi
  # the cluster's cgroup v1 directories (Slurm leaves the user level behind)
  if [ -n "$node" ]; then
    for m in $(awk '$3 == "cgroup" { print $2 }' /proc/mounts); do
      p=$m/slurm_$node
      [ -d "$p" ] || continue
      find "$p" -depth -type d -exec rmdir {} + 2>/dev/null
      [ -d "$p" ] && echo "cluster.sh: stop: $p still holds processes, left in place" >&2
    done
  fi
  rm -rf "$dir"
}

status() {
  [ -f "$conf" ] || { echo "cluster.sh: no cluster in $dir"; return 1; }
  local rc=0 n p
  for n in slurmctld slurmd; do
    p=$(pid_of "$dir/run/$n.pid")
    if alive "$p"; then echo "$n: running (pid $p)"; else echo "$n: not running"; rc=1; fi
  done
  p=$(pid_of "$dir/munge-key/munged.pid")
  if alive "$p"; then echo "munged: running (pid $p)"; else echo "munged: not running"; rc=1; fi
  echo "proctrack: $(cat "$dir/proctrack" 2>/dev/null || echo '?')"
  [ $rc = 0 ] && SLURM_CONF=$conf sinfo
  return $rc
}

case $cmd in
  start) start "${3:-auto}" ;;
  leftovers)
    for p in $(job_leftovers); do
      c=$({ tr '\0' ' ' </proc/"$p"/cmdline; } 2>/dev/null) && [ -n "$c" ] && echo "$p $c"
    done ;;
  stop) [ -d "$dir" ] || exit 0; stop_all ;;
  status) status ;;
  *) echo "cluster.sh: start, status or stop" >&2; exit 1 ;;
esac
