#!/bin/sh
# Start a one-node Slurm cluster on this machine (Debian's slurm-wlm and munge; run as root), for
# tests/distributed/test_batch_workers.py::test_a_slurm_array_of_workers_goes_through_the_jobs.
#   apt-get install -y slurm-wlm && sh tests/distributed/slurm_one_node.sh
set -e
host=$(hostname -s)
cpus=$(nproc)
cat > /etc/slurm/slurm.conf <<CONF
# One-node Slurm cluster for avatargen's batch-worker test (written by tests/distributed/slurm_one_node.sh).
ClusterName=avatargen
SlurmctldHost=$host
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
mkdir -p /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /run/munge
chown munge:munge /run/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
sleep 2
sinfo
