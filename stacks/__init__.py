"""Squall's CDK stacks and constructs; app.py builds them from cdk.json (see deployment.py)."""
