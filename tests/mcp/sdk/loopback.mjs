// Preloaded (node --import ./loopback.mjs) into servers that listen on every
// address (server-everything's app.listen(PORT)): a listen without a host
// binds 127.0.0.1, so the scenarios stay on loopback.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
    if ((typeof args[0] === "number" || typeof args[0] === "string") && typeof args[1] !== "string")
        args.splice(1, 0, "127.0.0.1");
    return listen.apply(this, args);
};
