// Wallet adapters for the fast-lane access page (/_concert/access).
//
// This file registers nothing by default. A site that wants visitors to pay from a browser
// wallet replaces it (or loads its own copy before access.js) with adapters registered on
// window.concertWallets, keyed by CAIP-2 network ("xrpl:0", "solana:5eykt4…") or by chain family
// ("xrpl", "stellar", "hedera", "solana"); an exact network wins over its family.
//
// Each adapter is an object with three async functions:
//
//   connect({network, offer, collection}) -> {address}
//       Ask the wallet for the account that will pay (offer) or that holds the NFT (collection).
//   signMessage({network, address, message}) -> {signature, publicKey}
//       Sign the plain-text NFT admission challenge (never used for payments). `signature` is
//       base64 (or a Uint8Array of its bytes): XRPL the DER or ed25519 signature over the
//       message bytes; Stellar the SEP-53 signature; Hedera 64 bytes (ed25519 over the
//       message, or secp256k1 r||s over its keccak-256); Solana ed25519 over the message
//       bytes. `publicKey` is what the wallet reports: the hex key on XRPL (required) and
//       Hedera (optional); Stellar and Solana may leave it empty (the address is the key).
//   createPaymentPayload({network, address, requirements, resource, prepare})
//       -> the mechanism-specific signed payload object that goes into the x402 payment's
//          "payload" member, e.g. {"signedTxBlob": "..."} on XRPL or {"transaction": "..."}
//          on Stellar, Hedera and Solana. `requirements` are the exact terms to pay; the
//          adapter must not change them. For Solana, `prepare(address)` returns the unsigned
//          transfer the server built ({transaction: base64, ...}), already checked by the page
//          to be one System transfer of exactly requirements.amount lamports from `address` to
//          requirements.payTo; the adapter signs that and nothing else.
//
// The page builds the x402 v2 payment around the payload, keeps it in sessionStorage until the
// server gives a final answer, and only ever retries that same signed payment.
(function () {
  "use strict";
  if (!window.concertWallets) {
    window.concertWallets = {};
  }
})();
