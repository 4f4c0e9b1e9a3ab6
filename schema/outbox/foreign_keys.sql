ALTER TABLE ONLY outbox.mcp_argument_keys
    ADD CONSTRAINT mcp_argument_keys_client_fkey FOREIGN KEY (client) REFERENCES outbox.mcp_clients(name) ON UPDATE CASCADE ON DELETE CASCADE;

ALTER TABLE ONLY outbox.mcp_argument_keys
    ADD CONSTRAINT mcp_argument_keys_tool_fkey FOREIGN KEY (tool) REFERENCES outbox.mcp_tools(tool) ON UPDATE CASCADE ON DELETE CASCADE;

ALTER TABLE ONLY outbox.mcp_tasks
    ADD CONSTRAINT mcp_tasks_client_fkey FOREIGN KEY (client) REFERENCES outbox.mcp_clients(name) ON DELETE CASCADE;

ALTER TABLE ONLY outbox.mcp_tools
    ADD CONSTRAINT mcp_tools_target_fkey FOREIGN KEY (target) REFERENCES outbox.targets(name) ON UPDATE CASCADE;

ALTER TABLE ONLY outbox.target_state
    ADD CONSTRAINT target_state_target_fkey FOREIGN KEY (target) REFERENCES outbox.targets(name) ON UPDATE CASCADE ON DELETE CASCADE;
