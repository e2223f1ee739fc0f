import { DefaultFailureConverter, type PayloadConverter, type ProtoFailure, type SerializationContext } from '@temporalio/common';

const plaintext = new DefaultFailureConverter();

/**
 * The failure converter of payload encryption (client/connection.ts dataConverterFromEnv), loaded by module path: the
 * client and the worker `require()` it, and the worker's workflow bundle is built with it (worker/worker.ts
 * bundleWorkflows), so it must be workflow-safe. A failure's message and stack trace travel in its `encodedAttributes`,
 * a payload the codec encrypts; the history keeps `Encoded failure` in their place. The failure's type (Orchard's error
 * code), `nonRetryable` and its kind (application, activity, timeout…) stay readable. Reading needs nothing from this
 * module: the SDK's default converter decodes `encodedAttributes` wherever they are present.
 */
class EncryptedFailureConverter extends DefaultFailureConverter {
  constructor() {
    super({ encodeCommonAttributes: true });
  }

  override errorToFailure(err: unknown, payloadConverter: PayloadConverter, context?: SerializationContext): ProtoFailure {
    // A worker that cannot decrypt a task's payloads fails the task with client/codec.ts's PayloadDecryptionError.
    // Encrypted, that failure would be under this worker's key, the very key that does not match: no operator could
    // read why. It names key ids only (which every encrypted payload's metadata shows anyway), and its cause is
    // node's crypto error: never data.
    if (err instanceof Error && err.name === 'PayloadDecryptionError') return plaintext.errorToFailure(err, payloadConverter, context);
    return super.errorToFailure(err, payloadConverter, context);
  }
}

export const failureConverter = new EncryptedFailureConverter();
