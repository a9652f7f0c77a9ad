"""Squall's names in Kubernetes: the labels and annotations it sets and reads.

One name each, used by the manifests Squall renders, the planner that reads the
cluster, the services that mark nodes, and the simulated cluster. The lowest layer:
it imports nothing. docs/design.md lists what each one means.
"""

from __future__ import annotations

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
JOB_ID_LABEL = "squall.io/job-id"
REPLICA_TYPE_LABEL = "squall.io/replica-type"
REPLICA_INDEX_LABEL = "squall.io/replica-index"
TEAM_LABEL = "squall.io/team"
# On a model service's Deployment, its pods, its Service and its PodDisruptionBudget: the service's name.
MODEL_SERVICE_LABEL = "squall.io/model-service"
NODE_GROUP_LABEL = "squall.io/node-group"
CAPACITY_TYPE_LABEL = "squall.io/capacity-type"
REGION_LABEL = "topology.kubernetes.io/region"
# The cluster a node is in, as the planner reads it when more than one cluster is
# configured (planner/kube.py sets it on every node it reads, and asks it of every pod;
# node group templates carry it): the planner's one view of many clusters, never a
# label Squall writes on a real node.
CLUSTER_LABEL = "squall.io/cluster"
# Whose an object is: Squall keeps an object it finds under a name it was about to
# create (HTTP 409) only when every one of these agrees with what it would have made
# (core/manifests.py `owned_alike`); otherwise the name is taken, and it says so.
OWNER_LABELS = (MANAGED_BY_LABEL, JOB_ID_LABEL, REPLICA_TYPE_LABEL, REPLICA_INDEX_LABEL, MODEL_SERVICE_LABEL)
GPU_RESOURCE = "nvidia.com/gpu"

# Set when Squall cordons a node; Squall uncordons only nodes that carry it.
CORDONED_AT_ANNOTATION = "squall.io/cordoned-at"
# Set by the scale function when it first finds a node empty: finished pods are
# deleted within a minute, so their finishedAt cannot carry a node's idle time.
EMPTY_SINCE_ANNOTATION = "squall.io/empty-since"
# Why a node is going (scale-in, spot-reclaim, ...), for the pods' NodeLost reason.
TERMINATION_REASON_ANNOTATION = "squall.io/termination-reason"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# On every replica Job Squall creates, for people and tools reading the cluster (admission
# reads the queue from the job table, core/queue.py; `squall plan --jobs` still reads them
# from a snapshot): the spec's priority (0..100), when the job was submitted (ISO time), and
# "true" on a job that was back in the queue after losing its objects.
PRIORITY_ANNOTATION = "squall.io/priority"
SUBMITTED_AT_ANNOTATION = "squall.io/submitted-at"
REQUEUED_ANNOTATION = "squall.io/requeued"
# How many replica Jobs the job has: admission waits until all of them exist.
REPLICAS_ANNOTATION = "squall.io/replicas"
# Set on a replica Job when admission let it run: the region it was admitted to.
ADMITTED_REGION_ANNOTATION = "squall.io/admitted-region"
