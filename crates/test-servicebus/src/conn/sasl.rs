//! The SASL layer (AMQP 1.0 part 5.3): the server offers ANONYMOUS (what Microsoft's
//! SDKs use before CBS) and PLAIN, which Service Bus accepts with a shared access
//! policy's name and key and which then authorizes every entity without a token.

use fe2o3_amqp_types::primitives::{Array, Symbol};
use fe2o3_amqp_types::sasl::{SaslCode, SaslInit, SaslMechanisms, SaslOutcome};
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::mpsc;

use super::Auth;
use crate::state::Shared;
use crate::wire::frame::{AMQP_HEADER, FrameReader, SASL_FRAME, SASL_HEADER, encode_frame};

/// Run the SASL exchange; the connection's authorization when it succeeds.
pub(super) async fn negotiate(
    reader: &mut FrameReader<OwnedReadHalf>,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    shared: &Shared,
) -> Result<Auth, String> {
    let header = reader.header().await.map_err(|e| e.to_string())?;
    if header != SASL_HEADER {
        // Service Bus requires SASL: answer with the header we speak and hang up.
        let _ = tx.send(SASL_HEADER.to_vec());
        return Err(if header == AMQP_HEADER {
            "the client skipped SASL; Service Bus requires it".to_owned()
        } else {
            format!("not an AMQP 1.0 protocol header: {header:02x?}")
        });
    }
    let mut out = SASL_HEADER.to_vec();
    let mechanisms =
        SaslMechanisms { sasl_server_mechanisms: Array(vec![Symbol::from("ANONYMOUS"), Symbol::from("PLAIN")]) };
    encode_frame(&mut out, SASL_FRAME, 0, &mechanisms, &[]);
    let _ = tx.send(out);

    let frame = reader.frame().await.map_err(|e| e.to_string())?;
    if frame.kind != SASL_FRAME {
        return Err("expected a sasl-init frame".to_owned());
    }
    let init: SaslInit = serde_amqp::from_slice(&frame.body).map_err(|e| format!("malformed sasl-init: {e}"))?;
    let verdict = match init.mechanism.as_str() {
        "ANONYMOUS" => Ok(Auth::default()),
        "PLAIN" => plain(init.initial_response.as_deref().map_or(&[][..], |r| &r[..]), shared),
        other => Err(format!("SASL mechanism {other} is not offered")),
    };
    let code = if verdict.is_ok() { SaslCode::Ok } else { SaslCode::Auth };
    let mut out = Vec::new();
    encode_frame(&mut out, SASL_FRAME, 0, &SaslOutcome { code, additional_data: None }, &[]);
    let _ = tx.send(out);
    verdict
}

/// `authzid \0 authcid \0 password`: the policy name and its key.
fn plain(response: &[u8], shared: &Shared) -> Result<Auth, String> {
    let mut parts = response.split(|b| *b == 0);
    let (_authzid, user, password) = (parts.next(), parts.next(), parts.next());
    match (user, password) {
        (Some(u), Some(p)) if u == shared.key_name.as_bytes() && p == shared.key.as_bytes() => {
            Ok(Auth { plain: true, tokens: Vec::new() })
        }
        _ => Err("SASL PLAIN: wrong policy name or key".to_owned()),
    }
}
