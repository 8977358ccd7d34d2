"""The only importers of their SDKs: kube.py (kubernetes) and ec2.py (boto3). Errors are translated
into ``bot.errors`` here, once."""
