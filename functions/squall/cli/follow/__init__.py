"""The researcher's loop, read side: follow a job's record, its logs and its TensorBoard files.

`watch` (the job record, until it is final), `logs` (its containers' output from
CloudWatch Logs), `tensorboard` (its event files, mirrored from S3). Each loop runs on
an injected `FollowClock`, so tests follow a job on virtual time without sleeping,
and reads the outside world only through the small protocols declared beside it
(the adapters in adapters/aws/ implement them; boto3 is never imported here).
"""
