"""A corpus of secret shapes and of ordinary agent text, for redaction tests.

``SECRETS``: ``(family, text, secret)`` - ``text`` is what a tool or an agent
might produce, ``secret`` the substring that must not survive redaction. Every
pattern family of :mod:`jarvismem.redaction` is here, in the forms seen in
transcripts: bare, in a header, in a URL, as key=value, in JSON, in JSON
escaped inside a JSON string.

``ORDINARY``: text an agent produces that holds no secret and must come back
unchanged - code, URLs, ids, hashes, base64 data, logs, and prose using the
words a careless pattern trips on ("token budget", "password reset flow",
"the secret of success").

Every credential here is fake, built from pieces so that no scanner mistakes
this file for a leak.
"""

from __future__ import annotations

import json

# --- fake credentials in real shapes ------------------------------------------------------

OPENAI = "sk-" + "Ab3dEf6hIj9kLm2nOp5qRs8t"
OPENAI_PROJECT = "sk-proj-" + "Zx8_Cv7-Bn6mQw5eRt4yUi3oP2"
ANTHROPIC = "sk-ant-api03-" + "Qa1Ws2Ed3Rf4Tg5Yh6Uj7Ik8"
STRIPE_LIVE = "sk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQr"
STRIPE_TEST = "sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RESTRICTED = "rk_live_" + "51H8xYzRestricted0123456"
STRIPE_WEBHOOK = "whsec_" + "5WbX5kEWLlfzsGNjH64I8lOOqUB6e8FH"
HUGGING_FACE = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
HUGGING_FACE_ORG = "api_org_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
GITHUB_CLASSIC = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_OAUTH = "gho_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GITHUB_APP = "ghs_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"
GITHUB_FINE = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"
GITLAB = "glpat-" + "xXyYzZ1234567890abcd"
NPM = "npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
SENDGRID = "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"
SLACK_BOT = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOp"
SLACK_USER = "xoxp-" + "123456789012-123456789012-123456789012-abcdef0123456789"
SLACK_REFRESH = "xoxe-" + "1-My0xLTEyMzQ1Njc4OTAxMi0xMjM0NTY3ODkw"
SLACK_APP = "xapp-" + "1-A0123456789-1234567890123-abcdef0123456789"
SLACK_HOOK_PATH = "T00000000/B00000000/" + "XXXXXXXXXXXXXXXXXXXXXXXX"
DISCORD_HOOK_TOKEN = "AbCdEf-GhIjKl_MnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUv"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SESSION_ID = "ASIA" + "JEXAMPLEXEG2JICE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GOOGLE = "AIza" + "SyA1234567890abcdefghijklmnopqrstuv"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBe=="
AZURE_SAS_SIG = "dnGHn3uLmw7y2nLPZi3CV1FrzcI%2BBZ8bnNGd4cHzYa0%3D"
PEM_BODY = (
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo\n"
)
PEM_RSA = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----"
PEM_PKCS8 = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}-----END PRIVATE KEY-----"
PEM_EC = f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}-----END EC PRIVATE KEY-----"
PEM_OPENSSH = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}-----END OPENSSH PRIVATE KEY-----"
PEM_ENCRYPTED = (
    f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{PEM_BODY}-----END ENCRYPTED PRIVATE KEY-----"
)
PEM_PGP = (
    f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PEM_BODY}=Ab12\n-----END PGP PRIVATE KEY BLOCK-----"
)
# A line of the key body: what must not survive.
PEM_LINE = PEM_BODY.splitlines()[1]

SECRETS: list[tuple[str, str, str]] = [
    # --- vendor tokens, bare in prose or output ---
    ("openai", f"use key {OPENAI} for the call", OPENAI),
    ("openai-project", f"OPENAI_KEY is {OPENAI_PROJECT}", OPENAI_PROJECT),
    ("anthropic", f"x-key {ANTHROPIC}", ANTHROPIC),
    ("stripe-live", f"charge created with {STRIPE_LIVE}.", STRIPE_LIVE),
    ("stripe-test", f"stripe.api_key = '{STRIPE_TEST}'", STRIPE_TEST),
    ("stripe-restricted", f"restricted key: {STRIPE_RESTRICTED}", STRIPE_RESTRICTED),
    ("stripe-webhook", f"endpoint secret {STRIPE_WEBHOOK}", STRIPE_WEBHOOK),
    ("hugging-face", f"huggingface-cli login --token {HUGGING_FACE}", HUGGING_FACE),
    ("hugging-face-org", f"org token {HUGGING_FACE_ORG}", HUGGING_FACE_ORG),
    ("github-classic", f"git clone https://{GITHUB_CLASSIC}@github.com/a/b", GITHUB_CLASSIC),
    ("github-oauth", f"oauth: {GITHUB_OAUTH}", GITHUB_OAUTH),
    ("github-app", f"installation token {GITHUB_APP} expires in 1h", GITHUB_APP),
    ("github-fine-grained", f"pat: {GITHUB_FINE} end", GITHUB_FINE),
    ("gitlab", f"GITLAB {GITLAB}", GITLAB),
    ("npm", f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    ("sendgrid", f"sendgrid {SENDGRID}", SENDGRID),
    ("slack-bot", f"slack bot {SLACK_BOT}", SLACK_BOT),
    ("slack-user", f"user token {SLACK_USER}", SLACK_USER),
    ("slack-refresh", f"rotated to {SLACK_REFRESH}", SLACK_REFRESH),
    ("slack-app", f"socket mode {SLACK_APP}", SLACK_APP),
    (
        "slack-webhook",
        f"POST https://hooks.slack.com/services/{SLACK_HOOK_PATH} -> 200",
        SLACK_HOOK_PATH,
    ),
    (
        "discord-webhook",
        f"https://discord.com/api/webhooks/123456789012345678/{DISCORD_HOOK_TOKEN}",
        DISCORD_HOOK_TOKEN,
    ),
    ("aws-access-key-id", f"aws id {AWS_ID} in config", AWS_ID),
    ("aws-session-key-id", f"temporary id {AWS_SESSION_ID}", AWS_SESSION_ID),
    ("google", f"maps key {GOOGLE}.", GOOGLE),
    ("jwt", f"token {JWT}", JWT),
    # --- headers ---
    ("bearer-header", "Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
    ("bearer-lowercase", "authorization: bearer q9w8e7r6t5y4u3i2", "q9w8e7r6t5y4u3i2"),
    ("basic-header", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("jwt-header", f"Authorization: JWT {JWT}", JWT),
    ("api-key-header", "X-API-Key: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ("cookie-header", "Set-Cookie: sid=s%3A9f8e7d6c5b4a3f2e; Path=/; HttpOnly", "9f8e7d6c5b4a"),
    # --- PEM blocks ---
    ("pem-rsa", f"key file:\n{PEM_RSA}\nend of file", PEM_LINE),
    ("pem-pkcs8", PEM_PKCS8, PEM_LINE),
    ("pem-ec", f"cat key.pem\n{PEM_EC}", PEM_LINE),
    ("pem-openssh", PEM_OPENSSH, PEM_LINE),
    ("pem-encrypted", PEM_ENCRYPTED, PEM_LINE),
    ("pem-pgp", PEM_PGP, PEM_LINE),
    ("pem-truncated", f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}…[truncated", PEM_LINE),
    ("pem-in-json", json.dumps({"private_key": PEM_RSA, "client_email": "a@b.iam"}), "VTLw7on"),
    ("pem-escaped-in-json", json.dumps({"out": json.dumps({"pem": PEM_RSA})}), "VTLw7on"),
    # --- connection strings and URLs ---
    (
        "azure-connection-string",
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE_KEY};"
        "EndpointSuffix=core.windows.net",
        AZURE_KEY[:40],
    ),
    (
        "azure-sas-url",
        f"https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sig={AZURE_SAS_SIG}",
        AZURE_SAS_SIG,
    ),
    ("postgres-url", "connect to postgres://admin:hunter2@db:5432/app", "hunter2"),
    ("redis-url", "REDIS_URL=redis://:pa55word@127.0.0.1:6379/0", "pa55word"),
    ("mongodb-url", "mongodb+srv://svc:Zq8%21xP2@cluster0.example.net/db", "Zq8%21xP2"),
    ("amqp-url", "amqp://guest:s3cretRabbit@mq:5672/", "s3cretRabbit"),
    ("sqlserver-connection", "Server=db;Database=app;User Id=sa;Password=S3cureP@ss!;", "S3cure"),
    # --- key=value forms ---
    ("api-key-query", "GET /v1?api_key=abc123def456", "abc123def456"),
    ("token-pair", "token=tok_live_123456", "tok_live_123456"),
    ("prefixed-secret", "client_secret=abcdef123456", "abcdef123456"),
    ("aws-secret", f"aws_secret_access_key={AWS_SECRET}", AWS_SECRET),
    ("env-export", f"export GITHUB_TOKEN={GITHUB_CLASSIC[4:]}", GITHUB_CLASSIC[4:]),
    ("dotenv-password", "DB_PASSWORD=correcthorsebattery", "correcthorsebattery"),
    ("yaml-password", "password: hunter2hunter2", "hunter2hunter2"),
    ("yaml-nested-secret", "  client_secret: 7f3a9c2e-1b4d", "7f3a9c2e-1b4d"),
    ("toml-password", 'password = "p4ss w0rd with spaces"', "w0rd with"),
    ("single-quoted", "secret='open sesame now'", "sesame"),
    ("cli-flag", "mysql --user=root --password=Tr0ub4dor#3", "Tr0ub4dor#3"),
    ("passphrase", "passphrase: 'my long passphrase 2024'", "long passphrase"),
    # --- JSON and escaped JSON ---
    ("json-password", '{"user": "bob", "password": "s3cr3tpw"}', "s3cr3tpw"),
    ("json-hunter2", json.dumps({"password": "hunter2"}), "hunter2"),
    ("json-api-key", json.dumps({"api_key": "zyx987"}), "zyx987"),
    ("json-number-token", '{"token": 918273645}', "918273645"),
    ("json-passphrase", '{"password": "correct horse battery staple"}', "horse battery"),
    ("json-escaped-quote", '{"db-password": "ab\\"cd ef"}', "cd ef"),
    ("json-escaped", json.dumps({"result": json.dumps({"password": "hunter2"})}), "hunter2"),
    (
        "json-double-escaped",
        json.dumps({"a": json.dumps({"b": json.dumps({"secret": "deep-s3cret"})})}),
        "deep-s3cret",
    ),
    ("python-repr", "{'user': 'bob', 'password': 'pyth0n-pw'}", "pyth0n-pw"),
    ("json-authorization", '{"Authorization": "Token 0123456789abcdef"}', "0123456789abcdef"),
]

ORDINARY: list[str] = [
    # prose with the words a careless pattern trips on
    "The token budget is 8000 tokens per turn.",
    "Press any key on the keyboard to continue.",
    "We spent 42 minutes; 3 of 7 steps passed.",
    "A basic understanding of the bearer bonds market helps.",
    "The password policy requires twelve characters.",
    "Keep the secret recipe in the keyboard drawer.",
    "Design the password reset flow: email link, then a new password form.",
    "Hard work is the secret of success.",
    "The secret: patience.",
    "Token: expired. Ask the user to sign in again.",
    "Password: incorrect (attempt 2 of 5).",
    "Authentication failed because the token has expired.",
    "Rotate the API key every 90 days and store secrets in the vault.",
    "The JWT spec and the Bearer scheme are described in RFC 6750.",
    "skip-list and sk-8 are short names, AKIA alone is not a key.",
    "Résumé: naïve café — ünïcödé text stays as it is.",
    "Use redis://127.0.0.1:6379/0 (no password) for local runs.",
    "max_tokens=4096 and temperature=0.2",
    "The model used 1,204 prompt tokens and 88 completion tokens.",
    "Private key management is out of scope for this sprint.",
    "",
    # code
    "def login(user, password):\n    return auth.check(user=user, password=password)",
    "password = getpass.getpass('Password: ')",
    "token = os.environ['GITHUB_TOKEN']",
    "api_key: str | None = Field(None, description='API key')",
    "self.token = token\nself.secret = secret",
    "client = OpenAI(api_key=os.getenv('OPENAI_API_KEY'))",
    "for token in tokenizer.encode(text):\n    counts[token] += 1",
    "if not password:\n    raise ValueError('password required')",
    "from huggingface_hub import hf_hub_download",
    "export PATH=$HOME/.local/bin:$PATH",
    "password=${DB_PASSWORD}",
    "SELECT id, name FROM users WHERE token_expires_at < now();",
    "git commit -m 'fix: handle expired token in refresh flow'",
    "curl -H 'Accept: application/json' https://api.example.com/v1/items?page=2",
    "stripe.PaymentIntent.create(amount=2000, currency='usd')",
    "pk_live_ keys are publishable and safe in the browser.",
    "kubectl get secret db-credentials -o yaml",
    # URLs, ids, hashes, data
    "Call 555-1234 or visit https://example.com/docs?page=2 for help.",
    "See https://github.com/org/repo/pull/1234#issuecomment-987654321",
    "https://hooks.slack.com/ is where incoming webhooks live.",
    "request id 550e8400-e29b-41d4-a716-446655440000 took 132 ms",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUEXAMPLE\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a@b",
    # structured tool output
    json.dumps({"prompt_tokens": 812, "completion_tokens": 96, "total_tokens": 908}),
    json.dumps({"token_type": "bearer", "expires_in": 3600}),
    json.dumps({"password_policy": {"min_length": 12}, "secret_name": "db-credentials"}),
    json.dumps({"status": "ok", "items": [{"id": 1, "name": "key lime pie"}]}),
    json.dumps({"cmd": "ls -la", "exit_code": 0, "stdout": "total 8\ndrwxr-xr-x 2 a a 4096"}),
    '{"password": null, "token": ""}',
    "2026-11-26T06:29:00Z INFO worker-3 processed 1500 jobs in 12.4s",
    "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\nKeyError: 'token'",
]
