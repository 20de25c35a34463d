// Signs in with Tally through openid-client 6, as its README shows:
// discovery(), the code flow with PKCE and a nonce (expectedNonce), the ID
// token validated against the JWKS, then fetchUserInfo(). Only URLs and
// credentials are Tally's (and allowInsecureRequests: the test server speaks
// plain HTTP on 127.0.0.1).
//
// Usage: node openid_client.mjs ISSUER CLIENT_ID CLIENT_SECRET REDIRECT_URI [ALG]
// Prints the authorization URL on the first line, reads the URL the browser
// was sent back to on stdin, and prints one JSON object: the ID token's
// claims, the userinfo answer, and the RP-initiated logout URL
// (buildEndSessionUrl) that signs the person out and back to
// REDIRECT_URI/signed-out with state "bye".
import * as client from 'openid-client'
import * as readline from 'node:readline'

const [issuer, clientId, clientSecret, redirectUri, alg] = process.argv.slice(2)

const metadata = { client_secret: clientSecret }
if (alg) metadata.id_token_signed_response_alg = alg
const config = await client.discovery(new URL(issuer), clientId, metadata, undefined, {
  execute: [client.allowInsecureRequests],
})

const codeVerifier = client.randomPKCECodeVerifier()
const codeChallenge = await client.calculatePKCECodeChallenge(codeVerifier)
const nonce = client.randomNonce()
const redirectTo = client.buildAuthorizationUrl(config, {
  redirect_uri: redirectUri,
  scope: 'openid profile email',
  code_challenge: codeChallenge,
  code_challenge_method: 'S256',
  nonce,
})
console.log(redirectTo.href)

const lines = readline.createInterface({ input: process.stdin })
const currentUrl = await new Promise((resolve) => lines.once('line', resolve))
lines.close()

const tokens = await client.authorizationCodeGrant(config, new URL(currentUrl.trim()), {
  pkceCodeVerifier: codeVerifier,
  expectedNonce: nonce,
  idTokenExpected: true,
})
const claims = tokens.claims()
const userinfo = await client.fetchUserInfo(config, tokens.access_token, claims.sub)
const endSession = client.buildEndSessionUrl(config, {
  id_token_hint: tokens.id_token,
  post_logout_redirect_uri: `${redirectUri}/signed-out`,
  state: 'bye',
})
console.log(
  JSON.stringify({ claims, id_token: tokens.id_token, userinfo, end_session_url: endSession.href }),
)
