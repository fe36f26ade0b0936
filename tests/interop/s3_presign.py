"""Presigns an S3 GET with botocore, AWS's own Python signer, at a given time: the reference the
meetings function's presigned recording URLs are compared with (moto checks no signature).

Reads one JSON object on stdin: `url` (unsigned), `region`, `access_key`, `secret_key`, `token`
(or null), `date` (the URL's X-Amz-Date) and `expires` (seconds); prints the presigned URL.
"""

import datetime
import json
import sys

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

args = json.load(sys.stdin)
signed_at = datetime.datetime.strptime(args["date"], "%Y%m%dT%H%M%SZ")
# The signer reads the time through this function; the URL under test was signed at `date`.
botocore.auth.get_current_datetime = lambda *_, **__: signed_at
credentials = Credentials(args["access_key"], args["secret_key"], args["token"])
signer = botocore.auth.S3SigV4QueryAuth(credentials, "s3", args["region"], expires=args["expires"])
request = AWSRequest(method="GET", url=args["url"])
signer.add_auth(request)
print(request.url)
