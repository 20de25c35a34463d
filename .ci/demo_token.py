"""Signs in to a running `tally demo` as a person would (sign-in form, consent
form) through the authorize URL it printed, and prints the access token.

Usage: demo_token.py AUTHORIZE_URL USERNAME PASSWORD
"""
import html.parser
import http.cookiejar
import sys
import urllib.error
import urllib.parse
import urllib.request


class Forms(html.parser.HTMLParser):
    """The forms of a page: action and (name, value) of their inputs."""

    def __init__(self):
        super().__init__()
        self.forms = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append((attrs.get("action", ""), []))
        elif tag == "input" and self.forms and attrs.get("name"):
            kind = attrs.get("type", "text")
            if kind in ("radio", "checkbox") and "checked" not in attrs:
                return
            self.forms[-1][1].append((attrs["name"], attrs.get("value") or ""))


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def main():
    authorize_url, username, password = sys.argv[1:4]
    parts = urllib.parse.urlsplit(authorize_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(jar), NoRedirect()
    )

    def call(url, fields=None):
        url = urllib.parse.urljoin(origin, url)
        data = urllib.parse.urlencode(fields).encode() if fields is not None else None
        request = urllib.request.Request(url, data=data, headers={"Origin": origin})
        try:
            response = opener.open(request, timeout=30)
        except urllib.error.HTTPError as answer:  # 3xx land here without redirects
            response = answer
        return response.status, response.headers.get("Location"), response.read().decode()

    def form(page, action):
        parser = Forms()
        parser.feed(page)
        for form_action, fields in parser.forms:
            if action in form_action:
                return form_action, fields
        sys.exit(f"no form posting to {action}")

    status, _, page = call(authorize_url)
    action, fields = form(page, "/signin")
    fields = [(n, v) for n, v in fields if n not in ("username", "password")]
    fields += [("username", username), ("password", password)]
    status, location, page = call(action, fields)
    if status != 303:
        sys.exit(f"sign-in answered {status}: {page[:500]}")
    status, location, page = call(location)
    if status == 200:
        action, fields = form(page, "/v1/oauth/authorize")
        status, location, page = call(action, fields + [("decision", "allow")])
    if status not in (302, 303) or not location:
        sys.exit(f"consent answered {status}: {page[:500]}")
    # The demo app's redirect URL takes the token in its query (an app's own
    # callback may take it in the fragment).
    redirect = urllib.parse.urlsplit(location)
    answer = urllib.parse.parse_qs(redirect.fragment or redirect.query)
    token = answer.get("access_token", [None])[0]
    if not token:
        sys.exit(f"no access token in {location}")
    print(token)


main()
