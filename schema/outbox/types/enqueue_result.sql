CREATE TYPE outbox.enqueue_result AS (
	key text,
	intent_id bigint,
	target text,
	status text,
	inserted boolean,
	response_status integer,
	response_body text,
	mismatch_fields text[]
);
