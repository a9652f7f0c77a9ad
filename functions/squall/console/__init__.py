"""`squall console`: a local web console over one deployment, on the SDK's Client.

It reads what the CLI reads (the jobs table, the latest scale-check decisions, CloudWatch
Logs, S3) with the user's own credentials, and serves pages on a loopback port only:
app.py builds the Flask app, guard.py decides which requests it answers (the session's
token, its own host and origin), pages/ holds one blueprint per page and server.py runs it.
"""
