//! One certificate for one name, RFC 8555 §7: order, prove control of the name, send a CSR for a
//! fresh P-256 key, fetch the chain.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, DistinguishedName, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use super::ChallengePreference;
use super::cache::{CaCache, pem_block};
use super::certificate::Issued;
use super::challenge::{Answer, Answers, Offered, tls_alpn01_certificate};
use super::client::{AcmeHttp, describe};

/// How long the CA gets to validate and then to issue; its `Retry-After` is honoured within.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(250))
    .backoff(1.5)
    .timeout(Duration::from_secs(90));

/// Registers the account for the cached key, or finds it if the CA already knows the key, and
/// sets its contact address when one is given.
pub(crate) async fn log_in(
    http: &AcmeHttp,
    cache: &CaCache,
    directory_url: &str,
    email: &str,
) -> Result<Account, String> {
    let pkcs8 = cache.account_key()?;
    let key = instant_acme::Key::from_pkcs8_der(pkcs8.clone_key())
        .map_err(|error| format!("account key: {error}"))?;
    let (account, _) = Account::builder_with_http(Box::new(http.clone()))
        .create_from_key(
            (key, PrivateKeyDer::Pkcs8(pkcs8)),
            directory_url.to_string(),
        )
        .await
        .map_err(|error| format!("account: {}", describe(&error)))?;
    if !email.is_empty() {
        let contact = format!("mailto:{email}");
        account
            .update_contacts(&[contact.as_str()])
            .await
            .map_err(|error| format!("account contact {contact}: {}", describe(&error)))?;
    }
    Ok(account)
}

/// Runs one order for `name` to the end; returns the certificate and the PEM to cache. The challenge answers are offered only while the CA
/// validates and withdrawn however this ends.
pub(crate) async fn obtain(
    account: &Account,
    name: &str,
    preference: ChallengePreference,
    answers: &Arc<Answers>,
) -> Result<(Issued, Vec<u8>), String> {
    let identifiers = [Identifier::Dns(name.to_string())];
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .map_err(|error| format!("new order: {}", describe(&error)))?;

    let mut offered: Vec<Offered> = Vec::new();
    let mut used = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization =
            authorization.map_err(|error| format!("authorization: {}", describe(&error)))?;
        match authorization.status {
            // A recent validation of the name is still good.
            AuthorizationStatus::Valid => continue,
            AuthorizationStatus::Pending => {}
            other => return Err(format!("authorization is {other:?}")),
        }
        let offers: Vec<ChallengeType> = authorization
            .challenges
            .iter()
            .map(|challenge| challenge.r#type.clone())
            .collect();
        let kind = pick(preference, &offers).ok_or_else(|| {
            format!("the CA offers neither tls-alpn-01 nor http-01 for {name} (offers {offers:?})")
        })?;
        let mut challenge = authorization
            .challenge(kind.clone())
            .ok_or_else(|| format!("challenge {kind:?} disappeared"))?;
        let key_authorization = challenge.key_authorization();
        let answer = match kind {
            ChallengeType::TlsAlpn01 => Answer::TlsAlpn01 {
                name: name.to_string(),
                certified: tls_alpn01_certificate(name, key_authorization.as_str())?,
            },
            _ => Answer::Http01 {
                token: challenge.token.clone(),
                key_authorization: key_authorization.as_str().to_string(),
            },
        };
        offered.push(answers.offer(answer));
        challenge
            .set_ready()
            .await
            .map_err(|error| format!("{}: {}", challenge_label(&kind), describe(&error)))?;
        tracing::info!(
            "acme: {name}: the CA validates over {}",
            challenge_label(&kind)
        );
        used.push(kind);
    }

    let status = order
        .poll_ready(&POLL)
        .await
        .map_err(|error| format!("validation: {}", describe(&error)))?;
    drop(offered);
    if status != OrderStatus::Ready {
        return Err(validation_failure(&mut order, &used).await);
    }

    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|error| format!("certificate key: {error}"))?;
    let mut params = CertificateParams::new(vec![name.to_string()])
        .map_err(|error| format!("certificate request: {error}"))?;
    params.distinguished_name = DistinguishedName::new();
    let request = params
        .serialize_request(&key)
        .map_err(|error| format!("certificate request: {error}"))?;
    order
        .finalize_csr(request.der())
        .await
        .map_err(|error| format!("finalize: {}", describe(&error)))?;
    let chain = order
        .poll_certificate(&POLL)
        .await
        .map_err(|error| format!("certificate: {}", describe(&error)))?;

    let key_pem = pem_block(
        "PRIVATE KEY",
        PrivatePkcs8KeyDer::from(key.serialize_der()).secret_pkcs8_der(),
    );
    let mut pem = chain.into_bytes();
    if !pem.ends_with(b"\n") {
        pem.push(b'\n');
    }
    pem.extend_from_slice(key_pem.as_bytes());
    let issued =
        Issued::from_pem(&pem).map_err(|reason| format!("the CA's certificate: {reason}"))?;
    Ok((issued, pem))
}

/// The challenge to answer: the preferred kind when the CA offers it, else the other one.
pub(crate) fn pick(
    preference: ChallengePreference,
    offers: &[ChallengeType],
) -> Option<ChallengeType> {
    let order = match preference {
        ChallengePreference::TlsAlpn01 => [ChallengeType::TlsAlpn01, ChallengeType::Http01],
        ChallengePreference::Http01 => [ChallengeType::Http01, ChallengeType::TlsAlpn01],
    };
    order.into_iter().find(|kind| offers.contains(kind))
}

fn challenge_label(kind: &ChallengeType) -> &'static str {
    match kind {
        ChallengeType::TlsAlpn01 => "tls-alpn-01",
        ChallengeType::Http01 => "http-01",
        _ => "challenge",
    }
}

/// The CA's own words on why validation failed: the problem document of the failed challenge.
async fn validation_failure(order: &mut instant_acme::Order, used: &[ChallengeType]) -> String {
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let Ok(state) = authorization.refresh().await else {
            continue;
        };
        for challenge in &state.challenges {
            if let Some(problem) = &challenge.error {
                return format!(
                    "{} validation failed: {problem}",
                    challenge_label(&challenge.r#type)
                );
            }
        }
    }
    let labels: Vec<&str> = used.iter().map(challenge_label).collect();
    format!(
        "validation failed ({}) without a reason from the CA",
        labels.join(", ")
    )
}
