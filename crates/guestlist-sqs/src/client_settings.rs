//! Where a builder's SQS client comes from: one handed over, or one configured from the AWS
//! environment, at a local endpoint when one is named. The consumer's and the relay's builders
//! share it, setters included.

use aws_sdk_sqs::Client;

use crate::Error;

/// A builder's client: handed over, or configured from the environment at `endpoint_url`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientSettings {
    pub(crate) client: Option<Client>,
    pub(crate) endpoint_url: Option<String>,
}

impl ClientSettings {
    /// The client handed over, else one configured from the AWS environment; refuses an
    /// endpoint that is no `http://` or `https://` URL.
    pub(crate) async fn connect(self) -> Result<Client, Error> {
        if let Some(client) = self.client {
            return Ok(client);
        }
        if let Some(endpoint) = &self.endpoint_url {
            crate::check_endpoint(endpoint)?;
        }
        Ok(crate::client(self.endpoint_url.as_deref()).await)
    }
}

/// The builder methods that set a [`ClientSettings`] held in the field `client_settings`.
macro_rules! client_setters {
    () => {
        /// The client to use, built as you like (`aws_config`, [`crate::local_client`], your own
        /// HTTP client); by default one is configured from the AWS environment.
        pub fn client(mut self, client: aws_sdk_sqs::Client) -> Self {
            self.client_settings.client = Some(client);
            self
        }

        /// The endpoint of a local SQS server (moto, LocalStack, ElasticMQ):
        /// `http://127.0.0.1:5000`. `AWS_ENDPOINT_URL` does the same from the environment.
        pub fn endpoint_url(mut self, url: &str) -> Self {
            self.client_settings.endpoint_url = Some(url.to_owned());
            self
        }
    };
}
pub(crate) use client_setters;
