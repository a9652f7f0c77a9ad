"""Exit codes, the trainer's half of the retry contract with Kubernetes.

Squall's Jobs fail at once on an application error and re-run a pod only after
infrastructure loss, so the exit code must say which one happened.
"""

OK = 0
# An unexpected error: a bug or bad data. Permanent, re-running would fail again.
FAILED = 1
# Bad flags, sweep parameters or TF_CONFIG. Permanent.
USAGE = 2
# 128 + SIGTERM: what a process killed by SIGTERM reports, and what Kubeflow's
# ExitCode restart policy treats as retryable. Used both when this pod was told to
# stop (a drain, a spot reclaim) and when a peer of a synchronous job was lost: in
# either case a checkpoint is in place (or the last periodic one is) and a re-run
# resumes from it. A SIGTERM that lands before the handler is installed kills the
# process with the same status, so "143: re-run me" holds from the first second.
RETRY = 143
