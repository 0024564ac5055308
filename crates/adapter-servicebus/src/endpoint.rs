//! Where to connect: a Service Bus connection string or an `amqp://` / `amqps://`
//! URL, parsed into an [`Endpoint`]. Secrets never appear in errors, warnings,
//! `Debug` or `Display`.

use std::fmt;

use drain_core::{ErrorKind, PortError};
use drain_runtime::redact::Secret;
use percent_encoding::percent_decode_str;

/// Default AMQP port without TLS.
pub const AMQP_PORT: u16 = 5672;
/// Default AMQP port with TLS.
pub const AMQPS_PORT: u16 = 5671;

/// The broker dialect an [`Endpoint`] speaks. See the crate docs for what differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Azure Service Bus (and its development emulator): CBS tokens, peek-lock,
    /// abandon = `modified`, dead-letter = `rejected` with `com.microsoft:dead-letter`,
    /// lock renewal through `$management`.
    ServiceBus,
    /// A generic AMQP 1.0 broker, tuned for RabbitMQ 3.10+ with `rabbitmq_amqp1_0`:
    /// queue address `/amq/queue/<q>`, abandon = `released`, dead-letter = `rejected`
    /// (the queue's dead-letter exchange decides where it goes), no lock renewal.
    Generic,
}

impl Profile {
    /// A short stable name (`servicebus`, `generic`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::ServiceBus => "servicebus",
            Profile::Generic => "generic",
        }
    }
}

/// How the client authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A Service Bus shared access policy: SASL ANONYMOUS, then a SAS token (signed with
    /// the key, refreshed before it expires) put on the CBS node.
    SharedAccessKey {
        /// `SharedAccessKeyName`.
        key_name: String,
        /// `SharedAccessKey`.
        key: Secret,
    },
    /// A ready-made SAS token (`SharedAccessSignature=` in the connection string):
    /// SASL ANONYMOUS, then the token put on the CBS node as it is. drain cannot sign
    /// a new one, so the connection works until the token's `se` expiry; once it has
    /// passed, reconnecting fails with `Auth` until the string holds a fresh token.
    SharedAccessSignature {
        /// The whole token, `SharedAccessSignature sr=…&sig=…&se=…&skn=…`.
        token: Secret,
    },
    /// SASL PLAIN.
    Plain {
        /// User name.
        username: String,
        /// Password.
        password: Secret,
    },
    /// SASL ANONYMOUS.
    Anonymous,
}

/// A parsed connection target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The broker dialect.
    pub profile: Profile,
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Whether to speak TLS (directly on connect, as Service Bus and RabbitMQ expect).
    pub tls: bool,
    /// How to authenticate.
    pub credentials: Credentials,
    /// The queue (Service Bus `EntityPath`, the URL's path). Required to connect.
    pub entity: Option<String>,
    /// RabbitMQ virtual host (URL query `vhost=`); sent as the AMQP open hostname
    /// `vhost:<name>`. `None`: the broker's default vhost.
    pub vhost: Option<String>,
}

/// An [`Endpoint`] with the warnings its input earned (unknown keys, repeated keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedEndpoint {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Things in the input that were ignored or overridden; never contains a secret.
    pub warnings: Vec<String>,
}

impl Endpoint {
    /// Parse a Service Bus connection string
    /// (`Endpoint=sb://<host>/;SharedAccessKeyName=…;SharedAccessKey=…[;EntityPath=…][;UseDevelopmentEmulator=true]`,
    /// or `SharedAccessSignature=<token>` instead of the key name and key)
    /// or an `amqp://[user[:password]@]host[:port][/queue][?vhost=name]` URL
    /// (`amqps://` for TLS).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] saying what is wrong; the message never contains a
    /// password or key.
    pub fn parse(input: &str) -> Result<ParsedEndpoint, PortError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(config_error("the connection string is empty"));
        }
        let lower = input.to_ascii_lowercase();
        if lower.starts_with("amqp://") || lower.starts_with("amqps://") {
            parse_url(input)
        } else if input.contains('=') {
            parse_connection_string(input)
        } else {
            Err(config_error(
                "expected an amqp:// or amqps:// URL or a Service Bus connection string (Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…)",
            ))
        }
    }

    /// The same endpoint with `entity` as its queue.
    #[must_use]
    pub fn with_entity(mut self, entity: impl Into<String>) -> Self {
        self.entity = Some(entity.into());
        self
    }

    /// The queue, or a [`ErrorKind::Config`] error when none was given.
    pub(crate) fn require_entity(&self) -> Result<&str, PortError> {
        match self.entity.as_deref() {
            Some(e) if !e.is_empty() => Ok(e),
            _ => Err(config_error(format!(
                "{self}: no queue given; add EntityPath=<queue> (Service Bus) or a /<queue> path (amqp URL)"
            ))),
        }
    }

    /// The hostname sent in the AMQP `open` frame.
    pub(crate) fn open_hostname(&self) -> String {
        match &self.vhost {
            Some(vhost) => format!("vhost:{vhost}"),
            None => self.host.clone(),
        }
    }
}

/// Redacted: `amqp://guest:***@127.0.0.1:5672/q`, `sb://ns.servicebus.windows.net:5671/q`.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match (self.profile, self.tls) {
            (Profile::ServiceBus, _) => "sb",
            (Profile::Generic, true) => "amqps",
            (Profile::Generic, false) => "amqp",
        };
        write!(f, "{scheme}://")?;
        match &self.credentials {
            Credentials::Plain { username, .. } => write!(f, "{username}:***@")?,
            Credentials::SharedAccessKey { key_name, .. } => write!(f, "{key_name}:***@")?,
            Credentials::SharedAccessSignature { .. } => f.write_str("sas:***@")?,
            Credentials::Anonymous => {}
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{}:{}", self.host, self.port)?;
        }
        write!(f, "/{}", self.entity.as_deref().unwrap_or(""))?;
        if let Some(vhost) = &self.vhost {
            write!(f, "?vhost={vhost}")?;
        }
        Ok(())
    }
}

pub(crate) fn config_error(message: impl Into<String>) -> PortError {
    PortError::new(ErrorKind::Config, message)
}

/// One `Key=Value` field of a Service Bus connection string.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Endpoint,
    KeyName,
    Key,
    EntityPath,
    Emulator,
    Signature,
}

impl Field {
    fn of(name: &str) -> Option<Field> {
        Some(match name.to_ascii_lowercase().as_str() {
            "endpoint" => Field::Endpoint,
            "sharedaccesskeyname" => Field::KeyName,
            "sharedaccesskey" => Field::Key,
            "entitypath" => Field::EntityPath,
            "usedevelopmentemulator" => Field::Emulator,
            "sharedaccesssignature" => Field::Signature,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Field::Endpoint => "Endpoint",
            Field::KeyName => "SharedAccessKeyName",
            Field::Key => "SharedAccessKey",
            Field::EntityPath => "EntityPath",
            Field::Emulator => "UseDevelopmentEmulator",
            Field::Signature => "SharedAccessSignature",
        }
    }
}

fn parse_connection_string(input: &str) -> Result<ParsedEndpoint, PortError> {
    let mut warnings = Vec::new();
    let mut fields: Vec<(Field, String)> = Vec::new();
    for (i, segment) in input.split(';').enumerate() {
        let segment = segment.trim();
        if segment.is_empty() {
            continue;
        }
        // The value may itself contain '=' (base64 keys end with it): split at the first.
        let Some((name, value)) = segment.split_once('=') else {
            return Err(config_error(format!(
                "Service Bus connection string: segment {} has no '=' (expected Key=Value pairs separated by ';')",
                i + 1
            )));
        };
        let name = name.trim();
        let Some(key) = Field::of(name) else {
            // Real keys are CamelCase words; anything else may be a pasted secret.
            let shown = name.len() <= 40 && !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphabetic());
            warnings.push(if shown {
                format!("Service Bus connection string: unknown key {name:?} ignored")
            } else {
                format!("Service Bus connection string: segment {} has an unknown key (not shown), ignored", i + 1)
            });
            continue;
        };
        if let Some(pos) = fields.iter().position(|(k, _)| *k == key) {
            warnings.push(format!("Service Bus connection string: {} given twice; the last one is used", key.name()));
            fields.remove(pos);
        }
        fields.push((key, value.trim().to_owned()));
    }
    let get = |key: Field| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());

    let credentials = match (get(Field::Signature), get(Field::KeyName), get(Field::Key)) {
        (Some(token), None, None) => {
            if !token.starts_with("SharedAccessSignature ") {
                return Err(config_error(
                    "Service Bus connection string: SharedAccessSignature must hold a whole token (SharedAccessSignature sr=…&sig=…&se=…&skn=…)",
                ));
            }
            Credentials::SharedAccessSignature { token: Secret::new(token) }
        }
        (Some(_), _, _) => {
            return Err(config_error(
                "Service Bus connection string: give either SharedAccessSignature or SharedAccessKeyName and SharedAccessKey, not both",
            ));
        }
        (None, Some(key_name), Some(key)) => {
            Credentials::SharedAccessKey { key_name: key_name.to_owned(), key: Secret::new(key) }
        }
        (None, key_name, key) => {
            let missing: Vec<&str> = [(Field::KeyName, key_name), (Field::Key, key)]
                .into_iter()
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| k.name())
                .collect();
            return Err(config_error(format!(
                "Service Bus connection string: missing {} (or a SharedAccessSignature)",
                missing.join(", ")
            )));
        }
    };
    if get(Field::Endpoint).is_none() {
        return Err(config_error("Service Bus connection string: missing Endpoint"));
    }
    let emulator = match get(Field::Emulator) {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(config_error(format!(
                "Service Bus connection string: UseDevelopmentEmulator must be true or false, got {v:?}"
            )));
        }
    };
    let (host, port) = parse_sb_endpoint(get(Field::Endpoint).unwrap_or_default())?;
    let port = port.unwrap_or(if emulator { AMQP_PORT } else { AMQPS_PORT });
    let entity = get(Field::EntityPath).map(|e| e.trim_matches('/').to_owned()).filter(|e| !e.is_empty());
    let endpoint =
        Endpoint { profile: Profile::ServiceBus, host, port, tls: !emulator, credentials, entity, vhost: None };
    Ok(ParsedEndpoint { endpoint, warnings })
}

/// `sb://host[:port][/]` -> host and port.
fn parse_sb_endpoint(value: &str) -> Result<(String, Option<u16>), PortError> {
    let rest = match value.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("sb") => rest,
        Some((scheme, _)) => {
            return Err(config_error(format!(
                "Service Bus connection string: Endpoint must start with sb://, got scheme {scheme:?}"
            )));
        }
        None => {
            return Err(config_error(format!(
                "Service Bus connection string: Endpoint must look like sb://<namespace>.servicebus.windows.net/, got {value:?}"
            )));
        }
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = split_host_port(authority, "Service Bus connection string: Endpoint")?;
    if host.is_empty() {
        return Err(config_error(format!("Service Bus connection string: Endpoint has no host: {value:?}")));
    }
    Ok((host, port))
}

fn parse_url(input: &str) -> Result<ParsedEndpoint, PortError> {
    let mut warnings = Vec::new();
    let (scheme, rest) = input.split_once("://").unwrap_or((input, ""));
    let tls = scheme.eq_ignore_ascii_case("amqps");
    if rest.contains('#') {
        return Err(config_error("amqp URL: a '#' fragment is not allowed (percent-encode '#' in a password as %23)"));
    }
    // Everything before the last '@' is user info, so an unencoded '/', '?' or ':' in
    // a user name or password cannot end the authority early and push credentials
    // into the host, port or path, which errors echo. (An '@' elsewhere, e.g. in a
    // vhost, must be percent-encoded as %40.)
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((userinfo, rest)) => (Some(userinfo), rest),
        None => (None, rest),
    };
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (hostport, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    let credentials = match userinfo {
        None => Credentials::Anonymous,
        Some(userinfo) => {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let username = decode(user)
                .ok_or_else(|| config_error("amqp URL: the user name is not valid percent-encoded UTF-8"))?;
            // Never echo the password, not even a fragment of it.
            let password = decode(password)
                .ok_or_else(|| config_error("amqp URL: the password is not valid percent-encoded UTF-8"))?;
            if username.is_empty() {
                return Err(config_error("amqp URL: a password without a user name (amqp://user:password@host/queue)"));
            }
            Credentials::Plain { username, password: Secret::new(password) }
        }
    };
    let (host, port) = split_host_port(hostport, "amqp URL")?;
    if host.is_empty() {
        return Err(config_error("amqp URL: no host (expected amqp://user:password@host:port/queue)"));
    }
    let entity = decode(path.trim_matches('/'))
        .ok_or_else(|| config_error("amqp URL: the queue (path) is not valid percent-encoded UTF-8"))?;
    if entity.contains('/') {
        return Err(config_error(format!(
            "amqp URL: the path must be one queue name, got {entity:?} (RabbitMQ queues are addressed as /amq/queue/<name> for you)"
        )));
    }
    let mut vhost = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "vhost" => {
                let v =
                    decode(value).ok_or_else(|| config_error("amqp URL: vhost is not valid percent-encoded UTF-8"))?;
                vhost = Some(v).filter(|v| !v.is_empty());
            }
            _ => warnings
                .push(format!("amqp URL: unknown query parameter {:?} ignored", decode(name).unwrap_or_default())),
        }
    }
    let endpoint = Endpoint {
        profile: Profile::Generic,
        host,
        port: port.unwrap_or(if tls { AMQPS_PORT } else { AMQP_PORT }),
        tls,
        credentials,
        entity: Some(entity).filter(|e| !e.is_empty()),
        vhost,
    };
    Ok(ParsedEndpoint { endpoint, warnings })
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_host_port(authority: &str, what: &str) -> Result<(String, Option<u16>), PortError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) =
            rest.split_once(']').ok_or_else(|| config_error(format!("{what}: unclosed '[' in the host")))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| config_error(format!("{what}: junk after ']' in the host")))?),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(config_error(format!("{what}: port {p:?} is not a number from 1 to 65535"))),
        },
    };
    Ok((host.to_owned(), port))
}

fn decode(s: &str) -> Option<String> {
    percent_decode_str(s).decode_utf8().ok().map(|c| c.into_owned())
}

#[cfg(test)]
mod tests;
