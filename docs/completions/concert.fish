complete -c concert -l cap -d 'Visitors served by the origin at the same time; everyone else waits in line. [default: 434] [env: CONCERT_CAPACITY]' -r
complete -c concert -l max-queue -d 'Most visitors allowed to wait; newcomers beyond it are turned away. 0 means no limit. [default: 369] [env: CONCERT_MAX_QUEUE]' -r
complete -c concert -l max-queue-per-ip -d 'Most visitors one address (an IPv6 /64) may have waiting at once; more get 429 until some are served. Addresses in -abuse-allow or -trusted-proxies are not limited. 0 means no limit. [default: 32] [env: CONCERT_MAX_QUEUE_PER_IP]' -r
complete -c concert -l token-ttl -d 'How long a waiting ticket survives without a poll. 0 uses the room default of 5m. [default: 0s] [env: CONCERT_TOKEN_TTL]' -r
complete -c concert -l first-poll-grace -d 'Time a new ticket has to make its first status poll before it is dropped. 0 turns the rule off; otherwise at least twice the retry interval. [default: 30s] [env: CONCERT_FIRST_POLL_GRACE]' -r
complete -c concert -l ready-grace -d 'Time a visitor whose turn has come may stay away before their place goes to the next in line; back within the ticket lifetime, they go to the front. 0 holds the place for the whole ticket lifetime; otherwise at least twice the retry interval. [default: 30s] [env: CONCERT_READY_GRACE]' -r
complete -c concert -l reaper -d 'How often abandoned tickets are cleared. 0 uses the room default of 5m. It runs more often when a grace needs it: every first-poll grace, and every sixth of the ready grace (at least 5s). [default: 36s] [env: CONCERT_REAPER]' -r
complete -c concert -l retry-after -d 'Retry-After sent to waiting clients and the page\'s poll interval. 0 becomes 1. [default: 5] [env: CONCERT_RETRY_AFTER]' -r
complete -c concert -l api-json -d 'Clients that do not accept HTML get a 429 JSON answer instead of the waiting page. [default: true] [env: CONCERT_API_JSON]' -r
complete -c concert -l html -d 'HTML file used as the waiting page. Empty uses the built-in page. [default: ""] [env: CONCERT_HTML_FILE]' -r
complete -c concert -l fastlane-config -d 'The fast lane\'s offers and terms (fastlane.json; `concert example fastlane` prints a start). Empty uses fastlane.json in the data directory when present; no file, no fast lane. Restart to change. [default: ""] [env: CONCERT_FASTLANE_CONFIG]' -r
complete -c concert -l networks-config -d 'How the fast lane reaches each payment network (networks.json; `concert example networks` prints a start). Empty uses networks.json in the data directory. Restart to change. [default: ""] [env: CONCERT_NETWORKS_CONFIG]' -r
complete -c concert -l fastlane-entry-ttl -d 'How long a fast-lane pass keeps letting its visitor in after its first use, even past the pass\'s own end. 0 (off) or between 30s and 24h. [default: 5m0s] [env: CONCERT_FASTLANE_ENTRY_TTL]' -r
complete -c concert -l rate -d 'Price to skip the line, per visitor ahead. Pricing is on when this or the surge price is above 0. With a fast lane it counts in offer prices: the first in line pays the offer\'s amount, each visitor ahead adds this times it. [default: 0] [env: CONCERT_RATE]' -r
complete -c concert -l surge -d 'Extra price per visitor ahead for each visitor waiting, added to the base price as the line grows (in offer prices with a fast lane). [default: 0] [env: CONCERT_SURGE]' -r
complete -c concert -l skip-url -d 'Where the waiting page\'s skip-the-line link points: a path or an http(s) URL. [default: ""] [env: CONCERT_SKIP_URL]' -r
complete -c concert -l pass -d 'How long a bought skip pass lasts. 0 or between 1m and 24h. Not in this version yet (no effect). [default: 0s] [env: CONCERT_PASS_DURATION]' -r
complete -c concert -l priority-cap -d 'Extra slots for visitors holding a priority grant. 0 means a quarter of the capacity (at least 1). [default: 0] [env: CONCERT_PRIORITY_CAP]' -r
complete -c concert -l priority-lane-rank -d 'Grant ranks up to this one may use the priority lane. 7 means no rank does. [default: 3] [env: CONCERT_PRIORITY_LANE_RANK]' -r
complete -c concert -l priority-wait -d 'How long a priority request may wait for a lane slot. At most 1m. [default: 5s] [env: CONCERT_PRIORITY_WAIT]' -r
complete -c concert -l priority-forms -d 'Form submissions (POST, PUT, PATCH, DELETE) from admitted visitors use the priority lane while the room is full, up to 20 a minute per admission pass; beyond that they wait in line. [default: true] [env: CONCERT_PRIORITY_FORMS]' -r
complete -c concert -l listen -d 'Address the public listener binds to. Restart to change. [default: :8080] [env: CONCERT_LISTEN]' -r
complete -c concert -l upstream -d 'The protected site, as an http or https URL. [default: http://127.0.0.1:3000] [env: CONCERT_UPSTREAM]' -r
complete -c concert -l upstream-timeout -d 'How long to wait for the origin\'s response headers after the request is sent; an upload that stalls this long gets 408, as does one averaging under 500 bytes a second once this long has passed. 0 waits forever. [default: 30s] [env: CONCERT_UPSTREAM_TIMEOUT]' -r
complete -c concert -l max-body -d 'Largest request body Concert takes in for a page: bigger ones get 413, a declared length at once, a chunked body as soon as it passes the limit. Bytes, or with a k, m or g suffix (powers of 1024). 0 means no limit. [default: 64m] [env: CONCERT_MAX_BODY]' -r
complete -c concert -l upload-timeout -d 'Longest time a page\'s request body may take to arrive in full before it gets 408; the body is taken in before the request waits for a page slot, so a slow upload never holds one. A body that sends nothing for 20s gets 408 sooner. 0 means no overall limit. [default: 2m0s] [env: CONCERT_UPLOAD_TIMEOUT]' -r
complete -c concert -l upload-disk-limit -d 'Most bytes of page uploads buffered on disk at once (bodies over 64 KiB wait there for their page slot); an upload that would go past it gets 503, so slow uploaders cannot fill the disk the data dir is on. Same units as -max-body. 0 means no limit. [default: 1g] [env: CONCERT_UPLOAD_DISK_LIMIT]' -r
complete -c concert -l preserve-host -d 'Forward the visitor\'s Host header instead of the origin\'s host. [default: true] [env: CONCERT_PRESERVE_HOST]' -r
complete -c concert -l trusted-proxies -d 'Addresses or CIDRs whose X-Forwarded-For header is believed. [default: 127.0.0.1/32,::1/128] [env: CONCERT_TRUSTED_PROXIES]' -r
complete -c concert -l access-log -d 'Write one line per request to standard output. [default: true] [env: CONCERT_ACCESS_LOG]' -r
complete -c concert -l secure-cookie -d 'Mark cookies Secure; turn on when visitors reach the site over HTTPS. [default: false] [env: CONCERT_SECURE_COOKIE]' -r
complete -c concert -l cookie-path -d 'Path attribute of the waiting-room and pass cookies. [default: /] [env: CONCERT_COOKIE_PATH]' -r
complete -c concert -l cookie-domain -d 'Domain attribute of the cookies. Empty keeps them on the exact host. [default: ""] [env: CONCERT_COOKIE_DOMAIN]' -r
complete -c concert -l bypass -d 'Paths sent straight to the origin without waiting. A trailing /* covers everything below. [default: /favicon.ico] [env: CONCERT_BYPASS]' -r
complete -c concert -l ban-paths -d 'Paths only scanners ask for; a request to one bans the client at once. Needs abuse protection on. [default: ""] [env: CONCERT_BAN_PATHS]' -r
complete -c concert -l unbuffered-upload-paths -d 'Page paths whose request bodies stream to the origin as they arrive instead of being taken in first. Risky: such a request holds its page slot while the client sends, kept in check only by the origin response timeout and a 500 bytes a second minimum; -max-body and -upload-timeout do not apply. [default: ""] [env: CONCERT_UNBUFFERED_UPLOAD_PATHS]' -r
complete -c concert -l assets -d 'Paths served to admitted visitors outside the page slots, limited per visitor. [default: ""] [env: CONCERT_ASSETS]' -r
complete -c concert -l asset-public -d 'Asset paths anyone may fetch without an admission pass, within the global asset limit. [default: ""] [env: CONCERT_ASSET_PUBLIC]' -r
complete -c concert -l asset-cap -d 'Asset requests in flight across all visitors. 0 means capacity times the HTTP/2 per-visitor limit. [default: 0] [env: CONCERT_ASSET_CAP]' -r
complete -c concert -l asset-wait -d 'How long an asset request waits for a global slot before 503. [default: 2s] [env: CONCERT_ASSET_WAIT]' -r
complete -c concert -l asset-user-cap-h1 -d 'Asset requests one visitor may have in flight over HTTP/1. [default: 8] [env: CONCERT_ASSET_USER_CAP_H1]' -r
complete -c concert -l asset-user-cap-h2 -d 'Asset requests one visitor may have in flight over HTTP/2 or HTTP/3. [default: 128] [env: CONCERT_ASSET_USER_CAP_H2]' -r
complete -c concert -l asset-user-wait -d 'How long an asset request waits for the visitor\'s own slot before 429. [default: 2s] [env: CONCERT_ASSET_USER_WAIT]' -r
complete -c concert -l admit-ttl -d 'Lifetime of the pass an admitted visitor receives; it slides while in use. At least 30s. [default: 10m0s] [env: CONCERT_ADMIT_TTL]' -r
complete -c concert -l client-proto-header -d 'Header a front proxy sets to the visitor\'s HTTP version, used to pick the per-visitor asset limit. [default: ""] [env: CONCERT_CLIENT_PROTO_HEADER]' -r
complete -c concert -l stream-paths -d 'WebSocket and server-sent-event paths for admitted visitors, outside the page slots. [default: ""] [env: CONCERT_STREAM_PATHS]' -r
complete -c concert -l stream-cap -d 'Streams open at the same time across all visitors. [default: 1000] [env: CONCERT_STREAM_CAP]' -r
complete -c concert -l abuse -d 'Count strikes and ban misbehaving clients. Off keeps existing bans but stops enforcing them. [default: true] [env: CONCERT_ABUSE]' -r
complete -c concert -l abuse-strikes -d 'Strikes within the window that ban a client. At least 1 while protection is on. [default: 20] [env: CONCERT_ABUSE_STRIKES]' -r
complete -c concert -l abuse-window -d 'Strikes older than this are forgotten. [default: 1m0s] [env: CONCERT_ABUSE_WINDOW]' -r
complete -c concert -l abuse-cooldown -d 'Length of a first ban; repeat offenders get longer ones. [default: 5m0s] [env: CONCERT_ABUSE_COOLDOWN]' -r
complete -c concert -l abuse-max-cooldown -d 'Upper bound for escalating bans; not shorter than the first ban. [default: 24h0m0s] [env: CONCERT_ABUSE_MAX_COOLDOWN]' -r
complete -c concert -l abuse-max-entries -d 'Most clients the abuse registry remembers at once. [default: 100000] [env: CONCERT_ABUSE_MAX_ENTRIES]' -r
complete -c concert -l abuse-allow -d 'Addresses or CIDRs that never collect strikes or bans. [default: ""] [env: CONCERT_ABUSE_ALLOW]' -r
complete -c concert -l tls-cert -d 'PEM file with the site\'s certificate (its chain after it) for HTTPS on -listen. Needs -tls-key; not together with -tls-domains. Read again when the file changes and on SIGHUP. [default: ""] [env: CONCERT_TLS_CERT]' -r
complete -c concert -l tls-key -d 'PEM file with the private key of -tls-cert. [default: ""] [env: CONCERT_TLS_KEY]' -r
complete -c concert -l tls-domains -d 'Host names to get certificates for automatically (ACME; Let\'s Encrypt unless -tls-directory names another authority). Setting any turns on HTTPS on -listen. Not together with -tls-cert. [default: ""] [env: CONCERT_TLS_DOMAINS]' -r
complete -c concert -l tls-email -d 'Address the certificate authority may write to about the certificates of -tls-domains. [default: ""] [env: CONCERT_TLS_EMAIL]' -r
complete -c concert -l tls-cache -d 'Directory keeping the ACME account key and the certificates of -tls-domains. [default: /var/lib/concert/acme] [env: CONCERT_TLS_CACHE]' -r
complete -c concert -l tls-staging -d 'Get untrusted test certificates from Let\'s Encrypt\'s staging service. Not together with -tls-directory. [default: false] [env: CONCERT_TLS_STAGING]' -r
complete -c concert -l tls-directory -d 'Directory URL of the ACME certificate authority for -tls-domains: https, or http only on a loopback host. Empty uses Let\'s Encrypt (its staging service with -tls-staging). [default: ""] [env: CONCERT_TLS_DIRECTORY]' -r
complete -c concert -l tls-directory-ca -d 'PEM file of extra root certificates trusted for the ACME directory\'s own HTTPS (a private or test certificate authority). [default: ""] [env: CONCERT_TLS_DIRECTORY_CA]' -r
complete -c concert -l http-listen -d 'Address of a plain-HTTP listener (e.g. :80) that answers ACME HTTP-01 challenges and sends everything else to https with a 308 redirect, path and query kept. Needs HTTPS on. Empty turns it off. Restart to change. [default: ""] [env: CONCERT_HTTP_LISTEN]' -r
complete -c concert -l hsts -d 'Answers over HTTPS carry Strict-Transport-Security with this max-age, so browsers keep to HTTPS for that long. 0 sends none. [default: 0s] [env: CONCERT_HSTS]' -r
complete -c concert -l portal-listen -d 'Address of the admin portal listener (it runs only while CONCERT_PORTAL_PASS is set). Empty turns the listener off. Restart to change. [default: 127.0.0.1:8081] [env: CONCERT_PORTAL_LISTEN]' -r
complete -c concert -l portal-allow -d 'Addresses or CIDRs allowed to reach the portal, checked on the connecting socket (forwarded headers are ignored). [default: 127.0.0.1/32,::1/128] [env: CONCERT_PORTAL_ALLOW]' -r
complete -c concert -l portal-session-ttl -d 'How long a portal sign-in lasts. At least 5m. [default: 8h0m0s] [env: CONCERT_PORTAL_SESSION_TTL]' -r
complete -c concert -l portal-secure-cookie -d 'Mark the portal\'s cookies Secure; turn on when the portal is reached over HTTPS. [default: false] [env: CONCERT_PORTAL_SECURE_COOKIE]' -r
complete -c concert -l portal-tls-cert -d 'PEM certificate (chain after it) for serving the portal over HTTPS. Needs -portal-tls-key. Empty keeps the portal on plain HTTP. Restart to change. [default: ""] [env: CONCERT_PORTAL_TLS_CERT]' -r
complete -c concert -l portal-tls-key -d 'PEM file with the private key of -portal-tls-cert. Restart to change. [default: ""] [env: CONCERT_PORTAL_TLS_KEY]' -r
complete -c concert -l history-log -d 'Request history file. Empty uses history.jsonl in the data directory (memory only without one); off, none, false or 0 keep the history in memory only. Restart to change. [default: ""] [env: CONCERT_HISTORY_LOG]' -r
complete -c concert -l cluster -d 'redis://host:port/db (or rediss:// for TLS) of a Redis or Valkey server that instances running in front of the same origin share: one cap, one line, one ban list. The password comes from CONCERT_CLUSTER_PASSWORD or the URL. Empty runs this instance alone. Restart to change. [default: ""] [env: CONCERT_CLUSTER]' -r
complete -c concert -l cluster-name -d 'Prefix of every key the instances share, so several sites can use one Redis. Instances of one site must use the same name. Restart to change. [default: concert] [env: CONCERT_CLUSTER_NAME]' -r
complete -c concert -l cluster-fallback-share -d 'Fraction of -cap this instance admits on its own while Redis cannot be reached. 0 means one part in as many as the instances last seen together. [default: 0] [env: CONCERT_CLUSTER_FALLBACK_SHARE]' -r
complete -c concert -l data-dir -d 'Directory for settings.json, bans, the queue snapshot and history. Empty turns persistence off. [default: /var/lib/concert/data] [env: CONCERT_DATA_DIR]' -r
complete -c concert -l demo -d 'Run a built-in demo origin. [default: false] [env: CONCERT_DEMO]' -r
complete -c concert -l log-format -d 'Process log format: text or json. [default: text] [env: CONCERT_LOG_FORMAT]' -r
complete -c concert -l workers -d 'Runtime worker threads. 0 uses TOKIO_WORKER_THREADS when set, else one per core. [default: 0] [env: CONCERT_WORKERS]' -r
complete -c concert -l metrics-path -d 'Path on the public listener answered with Prometheus metrics, unless a path list names it (they are always at /_room/metrics too). off leaves it to the origin. [default: /metrics] [env: CONCERT_METRICS_PATH]' -r
complete -c concert -l version -d 'Print the version and exit. [default: false]' -r
complete -c concert -s h -l help -d 'Print this help and exit.'
