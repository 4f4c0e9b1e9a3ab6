CREATE TRIGGER intents_truncate_history AFTER TRUNCATE ON outbox.intents FOR EACH STATEMENT EXECUTE FUNCTION outbox.intents_delete_history();
