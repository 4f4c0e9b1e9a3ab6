CREATE TRIGGER mcp_tools_passthrough BEFORE INSERT OR UPDATE ON outbox.mcp_tools FOR EACH ROW EXECUTE FUNCTION outbox.mcp_tools_passthrough();
