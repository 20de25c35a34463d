"""Signs in with Tally through Authlib's Flask client, set up as Authlib's
documentation says ("Flask OAuth Client", OpenID Connect): discovery from
server_metadata_url, the code flow with PKCE (S256) and a nonce, the ID token
validated against the JWKS, then userinfo. Only URLs and credentials are
Tally's.

Usage: authlib_client.py ISSUER CLIENT_ID CLIENT_SECRET REDIRECT_URI
Prints the authorization URL on the first line, reads the URL the browser was
sent back to on stdin, and prints one JSON object: the ID token's claims and
header, and the userinfo answer.
"""
import json
import sys
import urllib.parse

from authlib.integrations.flask_client import OAuth
from flask import Flask, jsonify

issuer, client_id, client_secret, redirect_uri = sys.argv[1:5]

app = Flask(__name__)
app.secret_key = "authlib test app"
oauth = OAuth(app)
oauth.register(
    name="tally",
    client_id=client_id,
    client_secret=client_secret,
    server_metadata_url=f"{issuer}/.well-known/openid-configuration",
    client_kwargs={"scope": "openid profile email", "code_challenge_method": "S256"},
)


@app.route("/login")
def login():
    return oauth.tally.authorize_redirect(redirect_uri)


@app.route("/callback")
def callback():
    token = oauth.tally.authorize_access_token()
    userinfo = oauth.tally.userinfo()
    return jsonify(
        claims=dict(token["userinfo"]),
        id_token=token["id_token"],
        userinfo=dict(userinfo),
    )


def main():
    browser = app.test_client()
    started = browser.get("/login")
    if started.status_code != 302:
        sys.exit(f"/login answered {started.status_code}: {started.get_data(as_text=True)}")
    print(started.headers["Location"], flush=True)
    back = sys.stdin.readline().strip()
    query = urllib.parse.urlsplit(back).query
    finished = browser.get(f"/callback?{query}")
    if finished.status_code != 200:
        sys.exit(f"/callback answered {finished.status_code}: {finished.get_data(as_text=True)}")
    print(json.dumps(finished.get_json()), flush=True)


main()
