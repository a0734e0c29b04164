//! The starting files printed by `concert example fastlane|networks`. JSON has no comments and
//! both files refuse unknown keys, so the JSON (stdout) is plain and valid, and what each key
//! means is printed beside it on stderr. The pair validates as is: test mode, testnets only.
//! The Stellar offer is shown in the notes rather than the JSON, because it needs a sponsor
//! secret the plain example cannot carry.

/// A test-mode `fastlane.json` selling five-minute passes on the XRPL testnet and Solana devnet.
pub fn example_fastlane() -> &'static str {
    r#"{
  "enabled": true,
  "test_mode": true,
  "origin": "http://127.0.0.1:8080",
  "policy_url": "",
  "merchant": "Example Shop",
  "terms_url": "https://shop.example/terms",
  "privacy_url": "https://shop.example/privacy",
  "refund_url": "https://shop.example/refunds",
  "pass_seconds": 300,
  "nft_pass_seconds": 30,
  "max_records": 100000,
  "offers": [
    {
      "label": "Skip the line for 5 minutes (1 test XRP)",
      "requirements": {
        "scheme": "exact",
        "network": "xrpl:1",
        "amount": "1000000",
        "asset": "XRP",
        "payTo": "r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6",
        "maxTimeoutSeconds": 60,
        "extra": { "areFeesSponsored": false }
      }
    },
    {
      "label": "Skip the line for 5 minutes (0.01 devnet SOL)",
      "requirements": {
        "scheme": "concert-native-sol",
        "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
        "amount": "10000000",
        "asset": "SOL",
        "payTo": "GyfFHe77pcZtdgGnWGw4T1VxCPB6JJyGLfjzMagDdsz3",
        "maxTimeoutSeconds": 120,
        "extra": { "areFeesSponsored": false }
      }
    }
  ],
  "collections": [],
  "listings": []
}
"#
}

/// The `networks.json` the example `fastlane.json` needs.
pub fn example_networks() -> &'static str {
    r#"{
  "xrpl:1": {
    "rpc": "https://s.altnet.rippletest.net:51234",
    "max_fee": 1000
  },
  "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": {
    "rpc": "https://api.devnet.solana.com"
  }
}
"#
}

/// What the keys of `fastlane.json` mean (printed to stderr beside the example).
pub const FASTLANE_EXAMPLE_NOTES: &str = "\
fastlane.json: the fast lane (visitors pay for a pass that skips the line).
Save the JSON below as fastlane.json in the data directory (or point -fastlane-config at it),
and the output of 'concert example networks' as networks.json. Unknown keys are refused.

  enabled            true turns the lane on; every rule below applies only then.
  test_mode          true allows only testnets, an http origin on a loopback host, and no
                     policy_url (payments are then not screened). Set false for real money.
  origin             the public https origin visitors use (scheme, host, port; no path).
  policy_url         the screening service every payer is checked against; required
                     outside test mode (its token is CONCERT_POLICY_TOKEN).
  merchant           the name visitors see (1-120 characters).
  terms_url, privacy_url, refund_url
                     required; shown before anyone pays.
  pass_seconds       how long a paid pass lasts (30-3600, default 300).
  nft_pass_seconds   how long an NFT holder's pass lasts (5-60, default 30).
  max_records        receipts the lane keeps at most (100-1000000, default 100000).
  offers             up to 8 ways to pay: a label and the exact x402 terms. amount is in the
                     chain's smallest unit (drops, stroops, tinybars, lamports); payTo is
                     YOUR receiving address - replace the example ones before use.
                     maxTimeoutSeconds is 30-300.
  collections        up to 32 NFT collections whose holders are let in.
  listings           up to 64 items sold by deposit; each needs an offer on its network
                     without a fixed destinationTag.

A Stellar testnet offer (10 test XLM; its network entry and sponsor secret are described by
'concert example networks') can be added to offers as:

    {
      \"label\": \"Skip the line for 5 minutes (10 test XLM)\",
      \"requirements\": {
        \"scheme\": \"exact\",
        \"network\": \"stellar:testnet\",
        \"amount\": \"100000000\",
        \"asset\": \"CDLZFC3SYJYDZT7K67VZ75HPJVIEUVNIXF47ZG2FB2RMQQVU2HHGCYSC\",
        \"payTo\": \"G... your receiving account\",
        \"maxTimeoutSeconds\": 60,
        \"extra\": { \"areFeesSponsored\": true }
      }
    }
";

/// What the keys of `networks.json` mean (printed to stderr beside the example).
pub const NETWORKS_EXAMPLE_NOTES: &str = "\
networks.json: how Concert reaches each payment network an offer uses.
Save the JSON below as networks.json in the data directory (or point -networks-config at it).
Endpoints must be https without credentials (test mode also allows http on a loopback host);
websocket (ws) endpoints are refused. Numbers may be written with or without quotes.

  rpc                JSON-RPC endpoint (XRPL, Stellar, Solana).
  horizon            Stellar Horizon endpoint (optional).
  mirror             Hedera mirror node (required on Hedera).
  fee_payer          Hedera account 0.0.N that pays fees; must equal the offers' feePayer.
  secret_env         renames the fee secret's variable (default CONCERT_STELLAR_FEE_SECRET
                     or CONCERT_HEDERA_FEE_SECRET); Stellar and Hedera need one set.
  max_fee            fee cap: XRPL drops (at most 1000), Stellar stroops (at most 50000).
  max_fee_tinybars   Hedera fee cap (at most 100000000).

Stellar offers need an entry like this one, and the fee sponsor's secret seed (S...) in
CONCERT_STELLAR_FEE_SECRET (or the variable secret_env names): that account submits each
payment and pays its fee, so fund it with a few XLM only (friendbot on testnet).

  \"stellar:testnet\": {
    \"rpc\": \"https://soroban-testnet.stellar.org\",
    \"horizon\": \"https://horizon-testnet.stellar.org\",
    \"max_fee\": 50000
  }
";
